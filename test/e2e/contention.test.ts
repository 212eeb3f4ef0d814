/**
 * Two live operators on one enrollment token (a cloned deployment, a forgotten old pod): the
 * hub and the SDK together must never let them merge their views. Each displaced operator waits
 * the backoff cap and comes back without resuming (SDK); a session that lost its claim is never
 * resumed anyway (hub); so every change of hands is a fresh session whose snapshot replaces the
 * plane's rows. The hub reports the contention, and once one of them is gone the plane holds
 * exactly the other's view.
 */
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, until, useE2E } from './support/e2e';
import type { LinkRecord } from './support/wire-tap';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E();
const SEED = suiteSeed(0xc0417e);

/** Every hello a link sent after one that ended with 4409 (a displacement). */
function hellosAfterDisplacement(links: LinkRecord[]): Record<string, unknown>[] {
  return links.flatMap((l, i) => (i > 0 && links[i - 1]?.close?.code === 4409 && l.hello ? [l.hello] : []));
}

describe(`two operators on one token (seed ${SEED})`, () => {
  it('take turns only through fresh sessions, are reported as contention, and the plane ends with exactly one view', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('twins');
    const a = e.cluster(reg.name, { shape: { nodes: 4, gpusPerNode: 4, seed: 1 } });
    const b = e.cluster(reg.name, { shape: { nodes: 2, gpusPerNode: 8, seed: 2 } });
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await a.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning });
    await converge(e.query, { uid: reg.uid, cluster: a });
    await b.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning });

    // They displace each other (each comes back after the backoff cap) until the hub calls it.
    const contention = await until(
      'the hub to report contention',
      async () => {
        const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
        return (view.contention as { displacements: number; sessions: { session_id: string }[] } | null) ?? undefined;
      },
      30_000,
    );
    expect(contention.displacements).toBeGreaterThan(3);
    const sessions = new Set(contention.sessions.map((s) => s.session_id));
    const seenA = new Set(a.tap.welcomes.map((w) => String(w.session_id)));
    const seenB = new Set(b.tap.welcomes.map((w) => String(w.session_id)));
    expect([...sessions].some((s) => seenA.has(s))).toBe(true);
    expect([...sessions].some((s) => seenB.has(s))).toBe(true);

    // Neither ever asked to resume a displaced session, and the hub never resumed one.
    for (const tap of [a.tap, b.tap]) {
      const after = hellosAfterDisplacement(tap.links);
      expect(after.length).toBeGreaterThan(0);
      for (const hello of after) expect(hello).toMatchObject({ session_id: null, resume_from: null });
      for (const w of tap.welcomes) expect(w.full_resync).toBe(true);
    }

    // The dust settles: one operator is gone, and the plane holds exactly the other's view.
    await a.stopOperator({ graceful: false });
    await converge(e.query, { uid: reg.uid, cluster: b, otherTaps: [a.tap], exactEvents: false }, { timeoutMs: 20_000 });
    // The data can match before the survivor's own snapshot is applied (its earlier session wrote
    // the same rows); once applied, every row is the survivor's current session's.
    const writers = async () =>
      (
        await e.query<{ obs_session: string }>(
          `select obs_session from nodes where cluster_uid = $1 union select obs_session from devices where cluster_uid = $1
           union select obs_session from observed_clusters where cluster_uid = $1`,
          [reg.uid],
        )
      ).map((w) => w.obs_session);
    await until('every row written by the survivor', async () => {
      const w = await writers();
      return w.length === 1 && w[0] === String(b.client.session.sessionId);
    }, 20_000);
    // Settled: b's session holds still over several polls, every row its own. (Taken before the
    // wait above, the session once changed under it: a hello of a's sent as a was stopped can
    // still reach the hub and take the claim, the newest hello winning, and b's next session
    // writes every row again.)
    const survivor = String(b.client.session.sessionId);
    const linksBefore = b.tap.links.length;
    await new Promise((r) => setTimeout(r, 1_500));
    const since = b.tap.links.slice(linksBefore - 1).map((l) => l.close?.code ?? 'open');
    expect(String(b.client.session.sessionId), `b's links since: ${since.join(', ')}`).toBe(survivor);
    expect(await writers()).toEqual([survivor]);
    const nodes = await e.query<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by node_id', [reg.uid]);
    expect(nodes.map((n) => n.node_id)).toEqual(['node-001', 'node-002']);
  }, 90_000);
});
