/**
 * A hub with tiny limits: a replay window of a few frames, a small send queue and replay buffer
 * bytes, a small max frame.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode, newId } from '../../src/protocol';
import { FAST_TIMERS, useHub } from './support/hub';

const LIMITS = {
  ...FAST_TIMERS,
  REPLAY_BUFFER_FRAMES: '4',
  REPLAY_BUFFER_BYTES: '6000',
  SEND_QUEUE_FRAMES: '6',
  DESIRED_PAGE_ROWS: '50',
  MAX_FRAME_BYTES: '8192',
  INGEST_BATCH_FRAMES: '8',
};
const h = useHub(LIMITS);
const cfg = {
  SEND_QUEUE_FRAMES: Number(LIMITS.SEND_QUEUE_FRAMES),
  REPLAY_BUFFER_FRAMES: Number(LIMITS.REPLAY_BUFFER_FRAMES),
  REPLAY_BUFFER_BYTES: Number(LIMITS.REPLAY_BUFFER_BYTES),
};


function desired(i: number, pad = 0) {
  return {
    workload_id: 'w',
    min_replicas: 1,
    max_replicas: 1,
    serving: { engine: 'vllm', model: 'm', image: 'img', args: Array.from({ length: Math.ceil(pad / 1000) }, () => 'x'.repeat(1000)), env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 + i },
  };
}

describe('hub backpressure (spec: Backpressure, hub → operator)', () => {
  it('desired state is never dropped: an operator that never releases its window is cut with 4429, and resume delivers everything', async () => {
    const c = await h.newCluster();
    const n = cfg.SEND_QUEUE_FRAMES + cfg.REPLAY_BUFFER_FRAMES + 5;
    for (let i = 0; i < n; i++) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d${i}`, desired(i))).status).toBe(200);
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    // Alive (pings) but never acknowledging: the window fills, frames wait, then the hub closes.
    const pinger = setInterval(() => peer.send('ping', {}, { ack: 0 }), 500);
    try {
      expect((await peer.closedWith(15_000)).code).toBe(CloseCode.SEND_QUEUE_FULL);
    } finally {
      clearInterval(pinger);
    }
    const got = peer.frames.filter((f) => f.seq !== null);
    expect(got.length).toBe(cfg.REPLAY_BUFFER_FRAMES);

    // Resume acknowledging as we go: every deployment arrives exactly once, in a complete stream.
    const again = await h.connect(c.token, w.payload.session_id as string);
    await again.hello({ cluster_id: c.name, session_id: w.payload.session_id as string, resume_from: 0 });
    const ids: string[] = [];
    for (;;) {
      const f = await again.next((x) => x.seq !== null, 10_000);
      again.send('ack', {}, { ack: f.seq });
      if (f.type === 'deployment.desired') ids.push(f.payload.deployment_id as string);
      if (f.type === 'stream.end') {
        expect(f.payload).toEqual({ complete: true, count: n });
        break;
      }
    }
    expect(new Set(ids).size).toBe(n);
    expect(ids.length).toBe(n);
    again.close();
  });

  it('when the hub send queue is full the hub closes the connection with 4429 (nothing is dropped)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // Each unknown type must be answered with a sequenced error; never acknowledged, they pile up.
    const unknown = (seq: number) => JSON.stringify({ v: 1, type: 'future.thing', id: newId(), seq, ack: 0, reply_to: null, ts: new Date().toISOString(), payload: {} });
    const n = cfg.SEND_QUEUE_FRAMES + cfg.REPLAY_BUFFER_FRAMES + 2;
    for (let i = 1; i <= n; i++) peer.sendRaw(unknown(i));
    // Answered once their batches commit: a frame after that (if the burst itself was not cut) is refused.
    await Promise.race([peer.closed, peer.ackedThrough(n).catch(() => undefined)]);
    if (!peer.isClosed) peer.sendRaw(unknown(n + 1));
    expect((await peer.closedWith()).code).toBe(CloseCode.SEND_QUEUE_FULL);
  });

  it('a window full in bytes holds frames back rather than pushing unacknowledged ones out of the replay buffer: the next resume replays them, no full resync', async () => {
    const c = await h.newCluster();
    const big = Math.floor(cfg.REPLAY_BUFFER_BYTES / 2);
    for (let i = 0; i < 3; i++) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/big${i}`, desired(i, big))).status).toBe(200);
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'deployment.desired', 10_000);
    await new Promise((r) => setTimeout(r, 300));
    // Only what the buffer can keep went out: a second large frame waits for an ack.
    const first = peer.frames.filter((f) => f.seq !== null).map((f) => f.seq);
    expect(first).toEqual([1, 2]);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, w.payload.session_id as string);
    const w2 = await again.hello({ cluster_id: c.name, session_id: w.payload.session_id as string, resume_from: 0 });
    expect(w2.payload.full_resync).toBe(false);
    // Replayed with their numbers, then the rest as the operator acknowledges.
    const seen: string[] = [];
    for (;;) {
      const f = await again.next((x) => x.seq !== null, 10_000);
      seen.push(f.type === 'deployment.desired' ? `${f.seq}:${String(f.payload.deployment_id)}` : `${f.seq}:${f.type}`);
      again.send('ack', {}, { ack: f.seq as number });
      if (f.type === 'stream.end') break;
    }
    expect(seen).toEqual(['1:resync.begin', '2:big0', '3:big1', '4:big2', '5:stream.end']);
    again.close();
  });
});
