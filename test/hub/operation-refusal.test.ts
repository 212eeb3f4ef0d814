import { describe, expect, it } from 'vitest';
import { useHub } from './support/hub';

/**
 * An operation the operator refused (an `error` replying to its operation.start, with no
 * operation.accepted: what the SDK sends when its admitOperation gate refuses, or when the
 * deadline passed before it could start) concludes as failed and is never shown accepted.
 * MESSAGES.md (error): an error replying to an operation.start concludes it as failed; the
 * lifecycle (OpenAPI: pending → sent → accepted → running → …) never passed through accepted.
 * Before, the ingest statement set accepted_at for any conclusion, a refusal included.
 */
const h = useHub();

describe('an operation the operator refused', () => {
  it('has no accepted_at: the operator never accepted it', async () => {
    const c = await h.newCluster('oprefuse');
    const { peer } = await h.openFresh(c);
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-unknown', params: {}, deadline_s: 300 });
    expect(r.status).toBe(202);
    const id = r.json.operation_id as string;
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);
    peer.send('error', { code: 'invalid', message: 'no node n-unknown in this cluster', retryable: false }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const op = (await h.admin('GET', `/operations/${id}`)).json;
    expect(op.state).toBe('failed');
    expect(op.history.map((e: any) => e.kind)).toEqual(['error']);
    expect(op.accepted_at).toBeNull();
    peer.close();
  });
});
