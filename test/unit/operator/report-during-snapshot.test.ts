/**
 * "full_resync means: ... the operator streams its complete observed state back, and both sides
 * then discard anything absent from that snapshot." The application's `snapshot()` lists its
 * state at some moment inside the call (an API server list is asynchronous). A report made while
 * that call is pending may or may not be in the snapshot; it must reach the hub after the stream,
 * or the snapshot, older than the report, overwrites it (a removal resurrected, an update undone)
 * or prunes it (a creation), and nothing re-sends it.
 *
 * Before the fix, such a report went out at once, ahead of the resync.begin: the hub applied the
 * report, then the stale snapshot over it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ObservedSnapshot } from '../../../src/operator/resync';
import { makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type SeenFrame } from './support/scripted-hub';
import { newId } from '../../../src/protocol';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NODE = SNAPSHOT.nodes[0]!;

/** What the hub ends up believing about node-a, applying the frames in seq order (last wins). */
function hubViewOfNode(frames: SeenFrame[]): unknown {
  let view: unknown = undefined;
  const seq = frames.filter((f) => f.seq !== null).sort((a, b) => (a.seq as number) - (b.seq as number));
  for (const f of seq) {
    const p = f.payload as { node_id?: string };
    if (p.node_id !== NODE.node_id) continue;
    if (f.type === 'node.observed') view = f.payload;
    if (f.type === 'node.removed') view = 'removed';
  }
  return view;
}

async function openWithPendingSnapshot() {
  let resolveSnapshot: ((s: ObservedSnapshot) => void) | null = null;
  const t = makeClient(hub, {
    // A list from the API server: taken when called, answered a little later.
    snapshot: () => {
      const listed = structuredClone(SNAPSHOT);
      return new Promise<ObservedSnapshot>((resolve) => (resolveSnapshot = () => resolve(listed)));
    },
  });
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1', full_resync: true });
  await eventually(() => resolveSnapshot !== null, 'the fresh session to ask for its snapshot');
  return { t, conn, resolve: () => resolveSnapshot!(SNAPSHOT) };
}

describe('reports made while snapshot() is pending', () => {
  it('a removal made while the snapshot is being taken reaches the hub after the stream: the node stays removed', async () => {
    const { t, conn, resolve } = await openWithPendingSnapshot();
    // node-a was listed, then deleted: the informer reports the removal.
    t.client.removeNode(NODE.node_id);
    await sleep(30);
    resolve();
    await readResync(conn);
    await conn.seen((f) => f.type === 'node.removed', 'the removal');
    expect(hubViewOfNode(conn.frames)).toBe('removed');
  });

  it('an update made while the snapshot is being taken is the last word on its node', async () => {
    const { t, conn, resolve } = await openWithPendingSnapshot();
    const cordoned = { ...NODE, schedulable: false };
    t.client.reportNode(cordoned);
    await sleep(30);
    resolve();
    await readResync(conn);
    await conn.seen((f) => f.type === 'node.observed' && (f.payload as { schedulable: boolean }).schedulable === false, 'the update');
    expect(hubViewOfNode(conn.frames)).toEqual(cordoned);
  });

  it('a graceful stop while the snapshot is being taken lets held reports go: the drain does not wait on the snapshot', async () => {
    const { t, conn } = await openWithPendingSnapshot();
    t.client.removeNode(NODE.node_id);
    await sleep(30);
    const stopped = t.client.stop({ graceful: true, timeoutMs: 60_000 });
    const removed = await conn.seen((f) => f.type === 'node.removed', 'the removal, released by the stop');
    conn.send('ack', {}, { ack: removed.seq! });
    await stopped;
    expect(t.client.state).toBe('stopped');
  });
});

describe('answers owed while snapshot() is pending', () => {
  // A report held for the stream (above) holds only itself and the reports after it: an answer the
  // SDK owes the hub is not observed state and has no place in the snapshot's order. Before the
  // fix, a report at the head of the queue held every frame behind it, so an operation started
  // while the application listed its state went unanswered until the list returned (never, if it
  // hung): the responder "went quiet" past the start's deadline.
  it('an operation started while the snapshot is taken is answered before the snapshot returns', async () => {
    const { t, conn, resolve } = await openWithPendingSnapshot();
    t.client.reportNode({ ...NODE, schedulable: false });
    await sleep(30);
    const { id } = conn.sendSeq('operation.start', {
      operation_id: '01J9X2E5G7QK8V3B0YHN4TZC6M',
      kind: 'node.cordon',
      target: NODE.node_id,
      params: {},
      deadline: new Date(t.timers.now() + 600_000).toISOString(),
    });
    await conn.seen((f) => f.type === 'operation.accepted' && f.reply_to === id, 'the operation accepted');
    await conn.seen((f) => f.type === 'operation.result' && f.reply_to === id, 'its result');
    expect(conn.frames.some((f) => f.type === 'resync.begin'), 'the snapshot has not been streamed yet').toBe(false);
    // The held report still follows the stream.
    resolve();
    await readResync(conn);
    await conn.seen((f) => f.type === 'node.observed' && (f.payload as { schedulable: boolean }).schedulable === false, 'the held report');
    expect(hubViewOfNode(conn.frames)).toMatchObject({ schedulable: false });
  });

  it('an unknown type sent while the snapshot is taken is answered before the snapshot returns', async () => {
    const { t, conn, resolve } = await openWithPendingSnapshot();
    t.client.reportNode({ ...NODE, schedulable: false });
    await sleep(30);
    const id = newId();
    // The hub's first sequenced frame of the session (it has sent none yet here).
    conn.sendRaw(JSON.stringify({ v: 1, type: 'recipe.desired', id, seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { x: 1 } }));
    await conn.seen((f) => f.type === 'error' && f.reply_to === id, 'the unknown type answered');
    resolve();
    await readResync(conn);
  });
});
