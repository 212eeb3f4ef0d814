/**
 * Every fresh session delivers an open operation again, and the hub records each delivery's start
 * frame so that an error replying to it concludes the operation. An operator that reconnects
 * fresh over and over grew that record by one id per session, for as long as the deadline (up to
 * a week), with nothing to bound it. Now START_FRAMES_KEPT are kept: the first (the SDK answers
 * the start it first accepted, across reconnects) and the newest, and a reply to the first or the
 * latest delivery still concludes the operation.
 */
import { describe, expect, it } from 'vitest';
import { START_FRAMES_KEPT } from '../../src/hub/db/desired';
import { sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

process.env.E2E_HUB_LOG = 'log';
const lines = captureHubLines();
const h = useHub();

describe('an open operation delivered to many fresh sessions', () => {
  for (const answered of ['first', 'latest'] as const) {
    it(`keeps the first and the newest start frames, and an error replying to the ${answered} delivery still concludes it`, async () => {
      const c = await h.newCluster('opfr');
      const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
      expect(r.status, JSON.stringify(r.json)).toBe(202);
      const id = r.json.operation_id as string;

      const sessions = START_FRAMES_KEPT + 3;
      const delivered: string[] = [];
      let last = null as Awaited<ReturnType<typeof h.openFresh>>['peer'] | null;
      for (let i = 0; i < sessions; i++) {
        last?.close();
        const { peer } = await h.openFresh(c);
        const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);
        delivered.push(sf.id as string);
        last = peer;
      }
      const [row] = await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [id]);
      expect(new Set(delivered).size).toBe(sessions);
      expect(row?.ids).toEqual([delivered[0], ...delivered.slice(-(START_FRAMES_KEPT - 1))]);

      const peer = last!;
      peer.send('error', { code: 'invalid', message: 'no node n-1 here', retryable: false }, { reply_to: (answered === 'first' ? delivered[0] : delivered.at(-1)) as string });
      await peer.ackedThrough(peer.nextSeq - 1);
      const op = (await h.admin('GET', `/operations/${id}`)).json;
      expect(op).toMatchObject({ state: 'failed', outcome_message: expect.stringContaining('no node n-1 here') });
      peer.close();
    });
  }

  it('an error replying to a delivery no longer kept concludes nothing, is not a rejection, and is logged with its reply_to', async () => {
    const c = await h.newCluster('opfr-old');
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const id = r.json.operation_id as string;
    const delivered: string[] = [];
    let last = null as Awaited<ReturnType<typeof h.openFresh>>['peer'] | null;
    for (let i = 0; i < START_FRAMES_KEPT + 2; i++) {
      last?.close();
      const { peer } = await h.openFresh(c);
      delivered.push((await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id)).id as string);
      last = peer;
    }
    const forgotten = delivered[1] as string;
    const [row] = await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [id]);
    expect(row?.ids).not.toContain(forgotten);

    const peer = last!;
    peer.send('error', { code: 'invalid', message: 'answering an old delivery', retryable: false }, { reply_to: forgotten });
    await peer.ackedThrough(peer.nextSeq - 1);
    await sleep(300);
    const op = (await h.admin('GET', `/operations/${id}`)).json;
    const rejections = (await h.admin('GET', `/clusters/${c.name}/rejections`)).json;
    const line = lines.find((l) => l.cluster === c.uid && l.msg === 'error frame from operator');
    expect({ state: op.state, concluded: op.concluded_at ?? null, rejections: rejections.items, level: line?.level, reply_to: line?.reply_to }).toEqual({
      state: 'sent',
      concluded: null,
      rejections: [],
      level: 'warn',
      reply_to: forgotten,
    });
    peer.close();
  });
});
