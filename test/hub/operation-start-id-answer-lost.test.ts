/**
 * The hub records an operation.start's frame id (markOperationsSent) before it sends the frame,
 * and keeps the first id recorded for good: the SDK answers the start it first accepted, whatever
 * the later deliveries. When that statement committed and its answer was lost, the retry recorded
 * a new id and sent that one: the first slot held an id no operator ever saw, and once newer
 * deliveries pushed the sent one out, an error answering it concluded nothing (found by a review
 * of lost answers, 2026-12-07). The retry now records and sends the id it may already have
 * recorded.
 */
import { describe, expect, it } from 'vitest';
import { answerResetRelay } from './support/answer-reset-relay';
import { useHubBehindRelay } from './support/proxy-hub';
import { FAST_TIMERS } from './support/hub';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '5000' }, answerResetRelay('wingsmith_mark_operations_sent_v'));

describe("an operation.start whose record's answer was lost", () => {
  it('is sent under the id the lost statement recorded, which stays the first one kept', async () => {
    const c = await h.newCluster('opid-lost');
    const { peer } = await h.openFresh(c);
    const reset = relay().resetNextAnswer();
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const id = r.json.operation_id as string;
    await reset;
    const start = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id, 15_000);
    const [row] = await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [id]);
    expect(row?.ids).toEqual([start.id]);

    // And an error answering it concludes the operation.
    peer.send('error', { code: 'invalid', message: 'no node n-1 here', retryable: false }, { reply_to: start.id as string });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect((await h.admin('GET', `/operations/${id}`)).json).toMatchObject({ state: 'failed' });
    peer.close();
  }, 40_000);
});
