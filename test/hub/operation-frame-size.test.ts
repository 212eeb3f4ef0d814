import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

/**
 * An operation whose operation.start frame could exceed MAX_FRAME_BYTES is refused at the admin
 * API (413 too_large naming params), as desired state is. Before, it was accepted 202 and could
 * never be delivered: the send path put an error frame in its place on every session, and an
 * operation cannot be replaced or withdrawn, so it showed "sent" until its deadline (up to 7
 * days). README (MAX_FRAME_BYTES): the admin API refuses what could exceed it.
 */
const MAX = 8192;
const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: String(MAX) });

describe('an operation whose operation.start frame exceeds MAX_FRAME_BYTES', () => {
  it('is refused at the admin API with 413 too_large (as desired state is), not accepted 202 and left undeliverable', async () => {
    const c = await h.newCluster('opbig');
    const { peer } = await h.openFresh(c);
    const params: Record<string, string> = {};
    for (let i = 0; i < 10; i++) params[`p${i}`] = 'a'.repeat(1000); // each value within the schema's 1024
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'model.prefetch', target: 'llama', params, deadline_s: 3600 });
    await sleep(1000);
    const sentInstead = peer.frames.filter((f) => f.type === 'error' && String(f.payload.message).includes('operation.start'));
    const state = r.status === 202 ? (await h.admin('GET', `/operations/${r.json.operation_id}`)).json.state : null;

    expect({ status: r.status, code: r.json?.error?.code, sentInstead: sentInstead.length, state }).toEqual({
      status: 413,
      code: 'too_large',
      sentInstead: 0,
      state: null,
    });
    peer.close();
  });
});
