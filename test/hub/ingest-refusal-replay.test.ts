/**
 * What this file proves: the operator's refusal of desired state (an error frame answering a
 * deployment.desired) is counted once per frame, however often the frame is applied.
 *
 * Before: a refusal applied past a hole was counted again when the operator replayed it after a
 * resume (the sequencer rightly forgets frames applied past a hole, InboundSequencer.rewind), so
 * the deployment's `refusals`, the cluster's `desired_refusals` and the session's
 * `desiredRefusals` counter all read 2 for one refusal. Now the statement skips a refusal whose
 * session and seq the deployment's last_refusal already names (or passes), and the session
 * counter takes what the database counted.
 *
 * DESIGN "How we prove it": "nothing applied twice". Spec: frames after a failed one "are still
 * delivered and applied (they are idempotent and delivery is at-least-once)". MESSAGES `error`:
 * an operator's error answering a deployment.desired "is the operator's refusal: the hub records
 * it on the deployment (last_refusal, refusals ...) and counts it".
 */
import { describe, expect, inject, it } from 'vitest';
import { desired, eventually, holdLock, node, useHub } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

async function refusalsOf(cluster: string, deploymentId: string): Promise<{ refusals: number; last_refusal: { seq: number; session_id: string } | null } | undefined> {
  const r = await h.admin('GET', `/clusters/${cluster}/deployments`);
  return r.json.items.find((x: any) => x.deployment_id === deploymentId);
}

describe('a refusal of desired state is counted once per frame', () => {
  it.skipIf(EMBEDDED)('applied past a hole and replayed after a resume, it is counted once on the deployment, the cluster and the session', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/big`, desired({ min_replicas: 64, max_replicas: 64 }));
    const d = await peer.next((x) => x.type === 'deployment.desired');
    peer.send('node.observed', node('n1')); // seq 1
    await peer.ackedThrough(1);

    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'n1' for update", [c.uid]);
    let released = false;
    try {
      const n1Id = peer.send('node.observed', node('n1', false)); // seq 2: waits on the lock (a hole)
      const errId = peer.send('error', { code: 'invalid', message: 'cannot render', retryable: false }, { reply_to: d.id }); // seq 3
      // The refusal is applied past the hole.
      await eventually(async () => ((await refusalsOf(c.name, 'big'))?.refusals === 1) || undefined, 10_000);
      expect(peer.lastAck()).toBe(1);

      // The operator reconnects and resumes from the hub's cursor, replaying seq 2 and 3 with their
      // original ids (the hub never acknowledged them).
      const again = await h.connect(c.token, sessionId);
      const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
      expect(w.payload.full_resync).toBe(false);
      expect(w.payload.ack_seq).toBe(1);
      again.hubCursor = peer.hubCursor;
      again.nextSeq = 2;
      again.send('node.observed', node('n1', false), { id: n1Id });
      again.send('error', { code: 'invalid', message: 'cannot render', retryable: false }, { reply_to: d.id, id: errId });
      await release();
      released = true;
      await again.ackedThrough(3, 10_000);
      expect(await refusalsOf(c.name, 'big')).toMatchObject({ refusals: 1, last_refusal: { seq: 3, session_id: sessionId } });
      // The live view is published with the cursor it was taken at: one past the replay counts it.
      const view = await eventually(async () => {
        const v = await h.admin('GET', `/clusters/${c.name}`);
        return (v.json.session?.live?.hub_cursor ?? 0) >= 3 ? v : undefined;
      }, 10_000);
      expect(view.json.desired_refusals).toBe(1);
      expect(view.json.session.live.counters.desiredRefusals).toBe(1);
      again.close();
    } finally {
      if (!released) await release();
    }
  });

  it('two refusals are two, in one batch or in two, and a later session counts its own', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/big`, desired({ min_replicas: 64, max_replicas: 64 }));
    const d = await peer.next((x) => x.type === 'deployment.desired');
    const refuse = () => peer.send('error', { code: 'invalid', message: 'cannot render', retryable: false }, { reply_to: d.id });
    refuse();
    refuse();
    await peer.ackedThrough(2);
    refuse();
    await peer.ackedThrough(3);
    expect(await refusalsOf(c.name, 'big')).toMatchObject({ refusals: 3, last_refusal: { seq: 3 } });
    peer.close();

    // A fresh session numbers from 1 again: its refusal at seq 1 is a new one.
    const { peer: fresh, sessionId } = await h.openFresh(c);
    // It arrived in the hub's resync stream, which openFresh read to its end.
    const d2 = fresh.frames.find((x) => x.type === 'deployment.desired');
    if (!d2) throw new Error('no deployment.desired in the fresh session\'s resync');
    fresh.send('error', { code: 'invalid', message: 'still cannot render', retryable: false }, { reply_to: d2.id });
    await fresh.ackedThrough(1);
    expect(await refusalsOf(c.name, 'big')).toMatchObject({ refusals: 4, last_refusal: { seq: 1, session_id: sessionId } });
    fresh.close();
  });
});
