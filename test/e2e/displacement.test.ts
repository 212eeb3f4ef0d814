/**
 * Displacement by a second operator for the same cluster: the newest hello wins the ownership
 * claim, the older session discovers it on its own (its poll, or its next fenced write) and is
 * closed 4409, and the plane converges to the survivor's view of the cluster. A displaced
 * session writes nothing (DESIGN decision 4): at the end every observed row was written by the
 * survivor's session.
 */
import { describe, expect, it } from 'vitest';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E();
const SEED = suiteSeed(0xd15b1a);

describe(`displacement by a second operator (seed ${SEED})`, () => {
  it('the older operator is closed 4409 while it is still streaming, and the plane converges to the survivor with nothing of the older one left', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('displace');
    // Two views of "the same" cluster that disagree: different nodes, different GPUs.
    const older = e.cluster(reg.name, { shape: { nodes: 4, gpusPerNode: 4, seed: 1 } });
    const newer = e.cluster(reg.name, { shape: { nodes: 2, gpusPerNode: 8, seed: 2 } });
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await older.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    await converge(e.query, { uid: reg.uid, cluster: older });

    // The old pod is terminated once it learns it was displaced (else the two would take turns).
    let displacedWith: number | null = null;
    older.client.on('closed', (c) => {
      if (displacedWith !== null || c.code !== 4409) return;
      displacedWith = c.code;
      void older.stopOperator({ graceful: false });
    });
    const churn = new Churn(rng, older, e.admin, { observedEveryMs: 25, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(300);
    await newer.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning });
    await until('the older operator to be displaced', () => displacedWith !== null, 10_000);
    await churn.stop();

    const target = { uid: reg.uid, cluster: newer, otherTaps: [older.tap], exactEvents: false, operationsRunOnce: true };
    await converge(e.query, target);
    expect(displacedWith).toBe(4409);
    expect(older.tap.closes(4409)).toHaveLength(1);
    // Everything the plane holds about the cluster was written by the survivor's session.
    const survivor = String(newer.client.session.sessionId);
    const writers = await e.query<{ obs_session: string }>(
      `select obs_session from nodes where cluster_uid = $1 union select obs_session from devices where cluster_uid = $1
       union select obs_session from observed_deployments where cluster_uid = $1 union select obs_session from observed_clusters where cluster_uid = $1`,
      [reg.uid],
    );
    expect(writers.map((w) => w.obs_session)).toEqual([survivor]);
    const nodes = await e.query<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by node_id', [reg.uid]);
    expect(nodes.map((n) => n.node_id)).toEqual(['node-001', 'node-002']);
    // The survivor got the desired state in its own resync and renders it exactly.
    expect(newer.model.toJSON().deployments.map((d) => [d.desired.deployment_id, d.replicas.length])).toEqual([['d1', 2]]);
    // And the hub now reports the survivor's session as the owner.
    const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
    expect((view.session as { session_id: string } | null)?.session_id).toBe(survivor);
  });
});
