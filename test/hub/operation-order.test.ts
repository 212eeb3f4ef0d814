import { describe, expect, inject, it } from 'vitest';
import { holdLock, node, sleep, useHub } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

/** Found by a conformance audit (2026-12-03): the outcome must not depend on how frames were batched. */
describe('operation replies conclude in seq order', () => {
  // MESSAGES.md (operation.result): "The first result concludes the operation; later ones
  // (redeliveries) change nothing about its state, outcome or timestamps"; (error): "An error
  // replying to an operation.start concludes that operation as failed". The same frames in the
  // same order must conclude the operation the same way whether or not they share an ingest batch
  // (test/hub/admin-operations.test.ts checks the two-batch case: failed).
  it.skipIf(EMBEDDED)('an error reply followed by a result in the same ingest batch still concludes the operation as failed', async () => {
    const c = await h.newCluster('opb');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('blocker'));
    await peer.ackedThrough(1);
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'replica.restart', target: 'd-1-abc', params: {}, deadline_s: 300 });
    expect(r.status).toBe(202);
    const id = r.json.operation_id as string;
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);

    // Stall the next statement on a row lock so the frames behind it gather into one batch.
    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'blocker' for update", [c.uid]);
    try {
      peer.send('node.observed', node('blocker'));
      await sleep(200);
      peer.send('error', { code: 'deadline', message: 'cannot restart before the deadline', retryable: false }, { reply_to: sf.id });
      peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'done after all' }, { reply_to: sf.id });
      await sleep(200);
    } finally {
      await release();
    }
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    const op = (await h.admin('GET', `/operations/${id}`)).json;
    expect(op.state).toBe('failed');
    expect(op.outcome_message).toContain('cannot restart before the deadline');
    peer.close();
  });
});
