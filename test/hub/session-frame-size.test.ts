/**
 * The frame size limit at the byte boundary, counted in UTF-8 bytes (multi-byte text).
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { FAST_TIMERS, node, sleep, useHub, type Peer } from './support/hub';

const LIMIT = 4096;
const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: String(LIMIT) });

/** A node.observed frame of exactly `bytes` UTF-8 bytes, padded by an unknown envelope field of `ch`. */
function frameOf(bytes: number, seq: number, ack: number, id: string, ch: string): string {
  const base = (pad: string) => JSON.stringify({ v: 1, type: 'node.observed', id, seq, ack, reply_to: null, ts: new Date().toISOString(), payload: node('big'), pad });
  const perCh = Buffer.byteLength(ch);
  let pad = '';
  while (Buffer.byteLength(base(pad)) + perCh <= bytes) pad += ch;
  while (Buffer.byteLength(base(pad)) < bytes) pad += 'a';
  const t = base(pad);
  expect(Buffer.byteLength(t)).toBe(bytes);
  return t;
}

async function session() {
  const c = await h.newCluster('rv-size');
  const { peer } = await h.openFresh(c);
  return { c, peer };
}

describe('frame size at the byte boundary', () => {
  for (const ch of ['é', '€', '😀']) {
    it(`a frame of exactly max_frame_bytes UTF-8 bytes of ${ch} is applied`, async () => {
      const { c, peer } = await session();
      const t = frameOf(LIMIT, 1, peer.hubCursor, newId(), ch);
      expect(t.length).toBeLessThan(LIMIT);
      peer.sendRaw(t);
      await peer.ackedThrough(1);
      expect((await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).map((r) => r.node_id)).toEqual(['big']);
      peer.close();
    });
    it(`a frame one byte over max_frame_bytes (${ch}, fewer UTF-16 units than the limit) closes 1009 and is not applied`, async () => {
      const { c, peer } = await session();
      const t = frameOf(LIMIT + 1, 1, peer.hubCursor, newId(), ch);
      expect(t.length).toBeLessThan(LIMIT);
      peer.sendRaw(t);
      expect((await peer.closedWith(5_000)).code).toBe(1009);
      await sleep(300);
      expect(await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([]);
    });
  }

  it('the welcome advertises the limit', async () => {
    const c = await h.newCluster('rv-size');
    const p = await h.connect(c.token);
    const w = await p.hello({ cluster_id: c.name });
    expect((w.payload.limits as { max_frame_bytes: number }).max_frame_bytes).toBe(LIMIT);
    p.close();
  });

  it('a hello one byte over the limit (multi-byte) closes 1009', async () => {
    const c = await h.newCluster('rv-size');
    const p: Peer = await h.connect(c.token);
    const base = (pad: string) => JSON.stringify({ v: 1, type: 'hello', id: newId(), seq: null, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false }, pad });
    let pad = '';
    while (Buffer.byteLength(base(pad)) + 3 <= LIMIT + 1) pad += '€';
    while (Buffer.byteLength(base(pad)) < LIMIT + 1) pad += 'a';
    p.sendRaw(base(pad));
    expect((await p.closedWith(5_000)).code).toBe(1009);
  });
});
