/**
 * MESSAGES.md (error): "Each fresh session delivers an open operation again in a new
 * operation.start; the hub remembers the first and the 15 newest of them, so an error replying to
 * another delivery is recorded as a rejection and concludes nothing." (desired.ts: "An error
 * answering a start frame not kept is recorded as a rejection, as any unknown reply_to.")
 * Such an error was acked and silently dropped: no rejection, no history, nothing in the admin
 * API said the operator refused a delivery of the operation (found by a review). It is recorded
 * now, and not answered (an error is not answered with another).
 */
import { describe, expect, it } from 'vitest';
import { START_FRAMES_KEPT } from '../../src/hub/db/desired';
import { useHub } from './support/hub';

const h = useHub();

async function rejectionsOf(cluster: string): Promise<{ frame_id: string; type: string; reason: string }[]> {
  const r = await h.admin('GET', `/clusters/${cluster}/rejections`);
  expect(r.status).toBe(200);
  return r.json.items;
}

describe('an error replying to an operation.start the hub no longer remembers', () => {
  it('is recorded as a rejection and concludes nothing', async () => {
    const c = await h.newCluster('rvuk');
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status).toBe(202);
    const id = r.json.operation_id as string;

    const delivered: string[] = [];
    let last = null as Awaited<ReturnType<typeof h.openFresh>>['peer'] | null;
    for (let i = 0; i < START_FRAMES_KEPT + 2; i++) {
      last?.close();
      const { peer } = await h.openFresh(c);
      delivered.push((await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id)).id as string);
      last = peer;
    }
    const [row] = await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [id]);
    const forgotten = delivered[1] as string;
    expect(row?.ids).not.toContain(forgotten);

    const peer = last!;
    const errId = peer.send('error', { code: 'invalid', message: 'refused an old delivery', retryable: false }, { reply_to: forgotten });
    await peer.ackedThrough(peer.nextSeq - 1);

    // Concludes nothing (this part holds today).
    expect((await h.admin('GET', `/operations/${id}`)).json).toMatchObject({ state: 'sent', concluded_at: null });
    // Recorded as a rejection (this is what is missing).
    const rejections = await rejectionsOf(c.name);
    expect(rejections.map((x) => x.frame_id)).toContain(errId);
    peer.close();
  });

  it("an error replying to another cluster's operation.start is recorded as a rejection, and that operation is untouched", async () => {
    const a = await h.newCluster('rvuka');
    const b = await h.newCluster('rvukb');
    const r = await h.admin('POST', `/clusters/${a.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    const pa = (await h.openFresh(a)).peer;
    const sfa = await pa.next((f) => f.type === 'operation.start');
    const pb = (await h.openFresh(b)).peer;
    const errId = pb.send('error', { code: 'invalid', message: 'not mine', retryable: false }, { reply_to: sfa.id as string });
    await pb.ackedThrough(pb.nextSeq - 1);
    expect((await h.admin('GET', `/operations/${r.json.operation_id}`)).json).toMatchObject({ state: 'sent', history: [] });
    expect((await rejectionsOf(b.name)).map((x) => x.frame_id)).toContain(errId);
    pa.close();
    pb.close();
  });
});
