/**
 * The fleet poll (DESIGN decision 4): sessions register at their claim and leave at their
 * disconnect; a few pollers each run one statement per interval and poke only the sessions whose
 * claim, registration, disablement, token or desired revision changed. Here the claim's direct
 * poke of the session it displaces is switched off, so the poll alone must cut it.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { eventually, FAST_TIMERS, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
const h = useHub({ ...FAST_TIMERS, DISPLACEMENT_POKE: 'off' });
const withinPoll = Number(FAST_TIMERS.POLL_INTERVAL_MS) * 2 + 2_000;

describe('fleet poll', () => {
  it('a displaced session is cut within a poll interval even when the direct poke is lost', async () => {
    const c = await h.newCluster();
    const older = await h.openFresh(c);
    const t0 = Date.now();
    const newer = await h.openFresh(c);
    const closed = await older.peer.closedWith(withinPoll);
    expect(closed.code).toBe(CloseCode.DISPLACED);
    expect(Date.now() - t0).toBeLessThan(withinPoll);
    newer.peer.close();
  });

  it('a session claimed after its shard went idle is polled at the poll interval again, not at the idle poller\'s next history pass', async () => {
    const c = await h.newCluster();
    const first = await h.openFresh(c);
    first.peer.close();
    await eventually(async () => (await h.sql('select 1 from live_sessions')).length === 0, 10_000);
    // Several polls: the cluster's poller has seen its shard empty and waits for its next
    // history retention pass (HISTORY_PRUNE_INTERVAL_MS, 10 minutes here).
    await sleep(Number(FAST_TIMERS.POLL_INTERVAL_MS) * 6);
    const older = await h.openFresh(c);
    const t0 = Date.now();
    const newer = await h.openFresh(c);
    const closed = await older.peer.closedWith(withinPoll);
    expect(closed.code).toBe(CloseCode.DISPLACED);
    expect(Date.now() - t0).toBeLessThan(withinPoll);
    newer.peer.close();
  });

  it('a session registers with the fleet poll at its claim and leaves it when its connection ends', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const rows = await h.sql('select session_id, generation from live_sessions where cluster_uid = $1', [c.uid]);
    expect(rows).toEqual([{ session_id: sessionId, generation: '1' }]);
    peer.close();
    await eventually(async () => (await h.sql('select 1 from live_sessions where cluster_uid = $1', [c.uid])).length === 0);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.session.connected).toBe(false);
  });

  it('a session that has caught up on desired state is not poked again', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, { workload_id: 'w', min_replicas: 1, max_replicas: 1, serving: { engine: 'vllm', model: 'm', image: 'i', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 1 } });
    await peer.next((f) => f.type === 'deployment.desired');
    // The poll pokes once (the session's recorded revision is behind); its check records it.
    await eventually(async () => {
      const r = await h.sql<{ seen: string; rev: string }>(
        'select s.seen_revision as seen, c.desired_revision as rev from live_sessions s join clusters c on c.uid = s.cluster_uid where s.cluster_uid = $1',
        [c.uid],
      );
      return r[0] && r[0].seen === r[0].rev;
    }, 5_000);
    const checks = async () => ((await h.admin('GET', `/clusters/${c.name}`)).json.session.live.wakes.by_kind.check ?? 0) as number;
    const before = await checks();
    await new Promise((r) => setTimeout(r, Number(FAST_TIMERS.POLL_INTERVAL_MS) * 4));
    expect(await checks()).toBe(before);
    peer.close();
  });

  it('a poll that fails for a schema fault (a migration not run) is logged at error, not as an outage', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const before = lines.length;
    // What a database one migration behind looks like to the poll's statement: a column it reads is missing.
    await h.sql('alter table live_sessions rename column checked_at to checked_at_gone');
    try {
      const line = await eventually(async () => lines.slice(before).find((l) => l.component === 'db-gateway' && l.msg.startsWith('fleet poll failed')), 10_000);
      expect(line).toMatchObject({ level: 'error', msg: expect.stringContaining('not an outage'), error: expect.stringMatching(/^42703: /) });
    } finally {
      await h.sql('alter table live_sessions rename column checked_at_gone to checked_at');
    }
    peer.close();
  });
});
