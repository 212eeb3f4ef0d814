/**
 * Idle sessions sleep (DESIGN decision 10): an operator's canonical ping that carries nothing new
 * is answered by the runtime without waking the session object, with a pong carrying the hub's
 * cursor; a ping that would release frames, or any other frame, reaches the object. The object
 * counts its wakes, which is how these tests see what they claim.
 */
import { describe, expect, it } from 'vitest';
import { canonicalPing } from '../../src/protocol';
import { desired, FAST_TIMERS, node, sleep, useHub, type HubHandle, type Peer, type TestCluster } from './support/hub';

const h = useHub({ ...FAST_TIMERS });

async function live(c: TestCluster): Promise<Record<string, any>> {
  const view = await h.admin('GET', `/clusters/${c.name}`);
  expect(view.json.session.source).toBe('object');
  return view.json.session.live;
}

/** Open a session and acknowledge everything the hub sent, so its replay buffer is empty. */
async function idleSession(hub: HubHandle, c: TestCluster): Promise<Peer> {
  const { peer } = await hub.openFresh(c);
  peer.send('ack', {}, { ack: peer.hubCursor });
  await eventuallyEmpty(c);
  return peer;
}

async function eventuallyEmpty(c: TestCluster): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await live(c)).replay_buffer_frames === 0) return;
    await sleep(50);
  }
  throw new Error('replay buffer never emptied');
}

describe('idle sessions sleep (spec: Liveness)', () => {
  it("an idle operator's canonical ping is answered by the runtime with the hub's cursor, without waking the session", async () => {
    const c = await h.newCluster();
    const peer = await idleSession(h, c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    await sleep(100);
    const before = (await live(c)).wakes.by_kind.message as number;
    for (let i = 0; i < 5; i++) {
      peer.sendRaw(canonicalPing(peer.hubCursor));
      const pong = await peer.next((f) => f.type === 'pong');
      expect(pong).toEqual({ v: 1, type: 'pong', id: null, seq: null, ack: 1, reply_to: null, ts: null, payload: {} });
    }
    expect((await live(c)).wakes.by_kind.message).toBe(before);
    peer.close();
  });

  it('a ping whose ack releases frames from the replay buffer reaches the session, and the answer after it is current', async () => {
    const c = await h.newCluster();
    const peer = await idleSession(h, c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    const frame = await peer.next((f) => f.type === 'deployment.desired');
    expect((await live(c)).replay_buffer_frames).toBe(1);
    const before = (await live(c)).wakes.by_kind.message as number;
    peer.sendRaw(canonicalPing(frame.seq as number));
    await peer.next((f) => f.type === 'pong');
    const after = await live(c);
    expect(after.replay_buffer_frames).toBe(0);
    expect(after.wakes.by_kind.message).toBe(before + 1);
    // Now nothing is unacknowledged: the same ping is answered by the runtime.
    peer.sendRaw(canonicalPing(frame.seq as number));
    await peer.next((f) => f.type === 'pong');
    expect((await live(c)).wakes.by_kind.message).toBe(before + 1);
    peer.close();
  });

  it("an auto-answered pong is never stale: it carries the cursor of the operator's latest applied frame", async () => {
    const c = await h.newCluster();
    const peer = await idleSession(h, c);
    for (let i = 1; i <= 3; i++) {
      peer.send('node.observed', node(`n${i}`));
      await peer.ackedThrough(i);
      await sleep(50);
      peer.sendRaw(canonicalPing(peer.hubCursor));
      expect((await peer.next((f) => f.type === 'pong')).ack).toBe(i);
    }
    peer.close();
  });

  it('pings the runtime answers keep a session alive past the silence limit; without them it is closed 4408', async () => {
    const c = await h.newCluster();
    const pinged = await idleSession(h, c);
    const limit = Number(FAST_TIMERS.IDLE_TIMEOUT_MS);
    const pinger = setInterval(() => pinged.sendRaw(canonicalPing(pinged.hubCursor)), limit / 4);
    try {
      await sleep(limit * 2);
      expect(pinged.isClosed).toBe(false);
    } finally {
      clearInterval(pinger);
    }
    expect((await pinged.closedWith(limit * 2)).code).toBe(4408);
  });

  it('the wake counters are readable through the admin API, and reading them wakes nothing', async () => {
    const c = await h.newCluster();
    const peer = await idleSession(h, c);
    const first = await h.admin('GET', `/clusters/${c.name}/session/wakes`);
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ session_id: expect.any(String), constructions: 1 });
    expect(first.json.recent.length).toBe(first.json.wakes);
    const second = await h.admin('GET', `/clusters/${c.name}/session/wakes`);
    expect(second.json.wakes).toBe(first.json.wakes);
    expect((await h.admin('GET', '/clusters/no-such/session/wakes')).status).toBe(404);
    peer.close();
  });
});
