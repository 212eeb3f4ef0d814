import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, FAST_TIMERS, node, sleep, useHub } from './support/hub';

const h = useHub();
const cfg = {
  PING_INTERVAL_MS: Number(FAST_TIMERS.PING_INTERVAL_MS),
  IDLE_TIMEOUT_MS: Number(FAST_TIMERS.IDLE_TIMEOUT_MS),
  POLL_INTERVAL_MS: Number(FAST_TIMERS.POLL_INTERVAL_MS),
};


describe('liveness (spec: Liveness)', () => {
  it('ping is answered with the canonical pong carrying the hub cursor', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    // A ping in the old form (with an id and a ts) still works; it just reaches the object.
    peer.send('ping', {});
    const pong = await peer.next((f) => f.type === 'pong');
    expect(pong).toEqual({ v: 1, type: 'pong', id: null, seq: null, ack: 1, reply_to: null, ts: null, payload: {} });
    peer.close();
  });

  it('the welcome advertises the ping cadence and the silence limit', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    expect(w.payload.limits).toMatchObject({ ping_interval_s: cfg.PING_INTERVAL_MS / 1000, idle_timeout_s: cfg.IDLE_TIMEOUT_MS / 1000 });
    peer.close();
  });

  it('a peer that has seen no frame of any kind for the idle limit is closed with 4408', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const last = Date.now();
    const closed = await peer.closedWith(cfg.IDLE_TIMEOUT_MS + cfg.POLL_INTERVAL_MS + 5_000);
    expect(closed.code).toBe(CloseCode.TIMEOUT);
    expect(Date.now() - last).toBeGreaterThanOrEqual(cfg.IDLE_TIMEOUT_MS - 1_100);
  });

  it('pings keep a quiet session alive past the idle limit', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const until = Date.now() + cfg.IDLE_TIMEOUT_MS * 1.5;
    while (Date.now() < until) {
      peer.send('ping', {});
      await new Promise((r) => setTimeout(r, cfg.IDLE_TIMEOUT_MS / 4));
    }
    expect(peer.isClosed).toBe(false);
    peer.close();
  });

  it('frames the operator leaves unacknowledged while its ack stands still are sent again after twice the idle limit, on the same connection', async () => {
    // As if a proxy had dropped the frame on a connection that stayed up: the operator keeps
    // pinging with the cursor from before it, and the hub has nothing after it to show a gap.
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const before = peer.hubCursor;
    peer.send('ping', {}, { ack: before });
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    const first = await peer.next((f) => f.type === 'deployment.desired');
    const copies = () => peer.frames.filter((f) => f.seq === first.seq);
    const sentAt = Date.now();
    while (copies().length < 2 && Date.now() - sentAt < 3 * cfg.IDLE_TIMEOUT_MS) {
      peer.send('ping', {}, { ack: before });
      await sleep(500);
    }
    expect(copies()).toHaveLength(2);
    expect(copies()[1]).toEqual(first);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(2 * cfg.IDLE_TIMEOUT_MS - 500);
    expect(peer.isClosed).toBe(false);

    // Acknowledged: nothing waits, nothing is sent again.
    peer.send('ping', {}, { ack: first.seq });
    for (let i = 0; i < (2 * cfg.IDLE_TIMEOUT_MS + 1_000) / 500; i++) {
      await sleep(500);
      peer.send('ping', {}, { ack: first.seq });
    }
    expect(copies()).toHaveLength(2);
    peer.close();
  });

  it('while the ack still stands after the whole window was sent again, only its first frame is sent again at each wait, on the same connection', async () => {
    // An operator that pings but reads nothing (or whose handler holds its stream): a copy of the
    // whole unacknowledged window at every wait would pile up in the runtime for a socket that
    // does not drain, and a close would cut the handler and run it again.
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const before = peer.hubCursor;
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    await h.admin('PUT', `/clusters/${c.name}/deployments/d2`, desired());
    const first = await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'd1');
    const second = await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'd2');
    const copies = (seq: number | null) => peer.frames.filter((f) => f.seq === seq).length;
    const sentAt = Date.now();
    while (copies(first.seq) < 3 && Date.now() - sentAt < 7 * cfg.IDLE_TIMEOUT_MS) {
      peer.send('ping', {}, { ack: before });
      await sleep(500);
    }
    expect({ first: copies(first.seq), second: copies(second.seq), closed: peer.isClosed }).toEqual({ first: 3, second: 2, closed: false });
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(4 * cfg.IDLE_TIMEOUT_MS - 1_000);
    peer.close();
  });

  it('a frame larger than max_frame_bytes is refused with 1009, and the object stays healthy', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end');
    const max = (w.payload.limits as { max_frame_bytes: number }).max_frame_bytes;
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.event', pad: 'x'.repeat(max + 10) }));
    expect((await peer.closedWith()).code).toBe(CloseCode.TOO_BIG);
    const again = await h.connect(c.token, w.payload.session_id as string);
    const w2 = await again.hello({ cluster_id: c.name, session_id: w.payload.session_id as string, resume_from: peer.hubCursor });
    expect(w2.payload.full_resync).toBe(false);
    again.close();
  });
});
