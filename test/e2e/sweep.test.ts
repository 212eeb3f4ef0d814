/**
 * The fleet poll's sweep: a session that has not checked in for a sweep period is poked anyway.
 * One whose object lost its connection without the news reaching Postgres (a hub restart on the
 * same storage) then says so, and the admin view stops calling it connected; a live one only
 * answers that it is alive (the poller records that, with no statement of the session's own).
 */
import { describe, expect, it } from 'vitest';
import { E2E_CLIENT, E2E_VARS, until, useE2E } from './support/e2e';

const e = useE2E({ ...E2E_VARS, LIVE_SWEEP_MS: '1000' });

describe('the fleet poll sweep', () => {
  it('keeps a live session registered without waking it into a check of its own', async () => {
    const reg = await e.register('swept');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    await until('connected', () => sim.client.state === 'open', 10_000);
    const wakes = async () => (await e.admin.must('GET', `/clusters/${reg.name}/session/wakes`, 200)) as { by_kind: Record<string, number> };
    const checkedAt = async () => (await e.query<{ at: string }>('select checked_at::text as at from live_sessions where cluster_uid = $1', [reg.uid]))[0]?.at;
    const polledAt = async () => (await e.query<{ at: string }>('select polled_at::text as at from cluster_owners where cluster_uid = $1', [reg.uid]))[0]?.at;
    // Let the converging settle (its desired pump's check), then watch sweeps only.
    await until('caught up', async () => {
      const r = await e.query<{ ok: boolean }>('select s.seen_revision >= c.desired_revision as ok from live_sessions s join clusters c on c.uid = s.cluster_uid where s.cluster_uid = $1', [reg.uid]);
      return r[0]?.ok === true;
    }, 10_000);
    const first = await checkedAt();
    const polled = await polledAt();
    const checksBefore = (await wakes()).by_kind.check ?? 0;
    await until('a sweep to record the session as alive', async () => (await checkedAt()) !== first, 15_000);
    expect((await wakes()).by_kind.check ?? 0).toBeGreaterThan(checksBefore);
    // Its own check statement would have published its view (polled_at): the sweep needed none.
    expect(await polledAt()).toBe(polled);
    expect(sim.client.state).toBe('open');
  }, 60_000);

  it('calls a live idle session connected, in the cluster view and the fleet view, long after its claim (its sweeps count as news)', async () => {
    const reg = await e.register('idle-live');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    await until('connected', () => sim.client.state === 'open', 10_000);
    // "Connected" is believed for three sweeps and two polls without news (3.6 s here): wait past
    // twice that with the session idle, so only its sweeps can have kept it connected.
    const staleAfterMs = 3 * 1000 + 2 * 300;
    await new Promise((r) => setTimeout(r, 2 * staleAfterMs + 500));
    expect(sim.client.state).toBe('open');
    const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
    expect((view.session as { connected: boolean }).connected).toBe(true);
    const fleet = (await e.admin.must('GET', '/fleet', 200)) as { items: { name: string; connected: boolean }[] };
    expect(fleet.items.find((c) => c.name === reg.name)?.connected).toBe(true);
  }, 60_000);

  it("finds a session whose connection ended without a close reaching its object, and stops calling it connected", async () => {
    const reg = await e.register('orphan');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    await until('connected', () => sim.client.state === 'open', 10_000);
    await sim.stopOperator({ graceful: false });
    // The same instance restarted on its storage: its objects never saw the connection end.
    await e.restartHub({ keepState: true });
    // Its object's silence alarm (the restart kept it) or the sweep, whichever comes first.
    await until(
      'the session found gone',
      async () => (await e.query('select 1 from live_sessions where cluster_uid = $1', [reg.uid])).length === 0,
      20_000,
    ).catch(async (err: unknown) => {
      // What tells the causes apart next time: which rows are left, and when they were last checked.
      const rows = await e.query('select cluster_uid, session_id, poll_shard, generation, checked_at::text, now()::text as now from live_sessions');
      throw new Error(`${String(err)}; live_sessions: ${JSON.stringify(rows)}`);
    });
    const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
    expect((view.session as { connected: boolean }).connected).toBe(false);
  }, 60_000);
});
