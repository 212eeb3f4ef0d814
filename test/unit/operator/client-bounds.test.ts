/**
 * The client at its control-frame bound (src/operator/README.md, "Bounds"): control frames
 * waiting are at most `controlQueueLimit`; no hub frame is applied while fewer than 2 control
 * slots are free (its ack is withheld and it is retried); `operation.progress` is dropped; an
 * operation's conclusion waits in the cursor record and is queued once there is room.
 *
 * The queue is made to fill the way it fills in production: the hub stops acknowledging. The
 * scripted hub's welcome grants a replay window of exactly the frames the session opens with
 * (link.stats and the five-frame observed resync), so every frame after them waits in the
 * client until the test acknowledges.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CursorStore, OperationRecord } from '../../../src/operator/cursor-store';
import type { OperationContext } from '../../../src/operator/handlers';
import { newId, type Payload } from '../../../src/protocol';
import { cursorReaches, desiredPayload, makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
import { operationStart } from './support/operations';
import { eventually, ScriptedHub, type HubConnection, type SeenFrame } from './support/scripted-hub';

const LIMIT = 5;
/** link.stats + resync.begin, cluster, node, device, stream.end: what the session opens with. */
const OPENING_FRAMES = 6;
const RETRY_MS = 100;

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

/** A session whose replay window is full: nothing more is written until the hub acknowledges. */
async function openStalled(options: Parameters<typeof makeClient>[1] = {}): Promise<{ t: TestClient; conn: HubConnection }> {
  const t = makeClient(hub, {
    controlQueueLimit: LIMIT,
    // Constant retry delays, and no liveness clock in the way while the test moves time.
    retry: { baseMs: RETRY_MS, capMs: RETRY_MS },
    idleTimeoutMs: 3_600_000,
    pingIntervalMs: 3_600_000,
    ...options,
  });
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: OPENING_FRAMES } });
  await readResync(conn);
  await eventually(() => t.client.stats.unacked === OPENING_FRAMES, 'the replay window to fill');
  expect(t.client.stats.queued).toBe(0);
  return { t, conn };
}

function startPayload(t: TestClient): Payload<'operation.start'> {
  return {
    operation_id: newId(),
    kind: 'node.drain',
    target: 'node-a',
    params: { grace_period_s: 30 },
    deadline: new Date(t.timers.now() + 600_000).toISOString(),
  };
}

/** An operation handler the test concludes by hand. */
function manualOperation() {
  const running = new Map<string, { ctx: OperationContext; finish: (outcome: 'succeeded' | 'failed') => void }>();
  const handler = (payload: Payload<'operation.start'>, ctx: OperationContext) =>
    new Promise<{ outcome: 'succeeded' | 'failed'; message: string }>((resolve) => {
      running.set(payload.operation_id, { ctx, finish: (outcome) => resolve({ outcome, message: outcome }) });
    });
  return { running, handler };
}

const framesOf = (conn: HubConnection, type: string, pred: (f: SeenFrame) => boolean = () => true) =>
  conn.frames.filter((f) => f.type === type && pred(f));
const ofOperation = (id: string) => (f: SeenFrame) => f.payload.operation_id === id;
const maxSeq = (conn: HubConnection) => conn.frames.reduce((m, f) => (f.seq !== null && f.seq > m ? f.seq : m), 0);
const refusedByQueue = (t: TestClient) => t.logger.records.filter((r) => r.msg === 'send queue refused a frame');

/** Room frees: the hub acknowledges what it got, and time moves on for the frames withheld meanwhile. */
async function release(t: TestClient, conn: HubConnection, done: () => boolean, what: string, each: () => void = () => {}): Promise<void> {
  await eventually(() => {
    each();
    if (done()) return true;
    const max = maxSeq(conn);
    if (max > conn.highestAckFromHub) conn.send('ack', {}, { ack: max });
    else if (t.client.stats.queued === 0) t.timers.advance(RETRY_MS);
    return false;
  }, what);
}

/** A round trip: once the pong is here, everything the client wrote before it is too. */
async function sync(conn: HubConnection): Promise<void> {
  const before = framesOf(conn, 'pong').length;
  conn.send('ping', {});
  await eventually(() => framesOf(conn, 'pong').length > before, 'pong');
}

async function recordOf(store: CursorStore, operationId: string): Promise<OperationRecord | undefined> {
  return (await store.load())?.operations.find((o) => o.operationId === operationId);
}

/** Wait until the saved record of an operation satisfies `pred`. */
async function recordWhere(store: CursorStore, operationId: string, pred: (r: OperationRecord) => boolean, what: string): Promise<OperationRecord> {
  let last: OperationRecord | undefined;
  const deadline = Date.now() + 5_000;
  for (;;) {
    last = await recordOf(store, operationId);
    if (last && pred(last)) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe('the control-frame bound', () => {
  it('never holds more than controlQueueLimit control frames, and every reply still reaches the hub', async () => {
    const { t, conn } = await openStalled({
      desiredResult: () => ({ ok: false, retryable: false, reason: 'no such gpu model', code: 'invalid' }),
      handlers: {
        operation: (_p, ctx) => {
          ctx.progress('one');
          ctx.progress('two');
          return { outcome: 'succeeded', message: 'done' };
        },
      },
    });
    let maxQueued = 0;
    const sample = () => {
      maxQueued = Math.max(maxQueued, t.client.stats.queued);
    };
    const sampler = setInterval(sample, 1);
    try {
      const ops: { id: string; operationId: string }[] = [];
      const desired: string[] = [];
      for (let i = 0; i < 12; i++) {
        const p = startPayload(t);
        ops.push({ id: conn.sendSeq('operation.start', p).id, operationId: p.operation_id });
        if (i % 4 === 0) desired.push(conn.sendSeq('deployment.desired', desiredPayload(`d${i}`)).id);
      }
      const total = ops.length + desired.length;
      // Stalled: the client takes what fits and withholds the rest.
      await eventually(() => t.client.stats.transientFailures > 0 || t.client.session.cursor === total, 'frames applied or withheld');
      await sync(conn);
      sample();
      expect(maxQueued).toBeLessThanOrEqual(LIMIT);
      expect(t.client.stats.queued).toBeGreaterThan(0);
      expect(t.client.session.cursor).toBeLessThan(total);

      const allConcluded = () => t.client.session.cursor === total && framesOf(conn, 'operation.result').length === ops.length;
      await release(t, conn, allConcluded, 'everything applied and concluded', sample);
      await release(t, conn, () => t.client.stats.queued === 0 && t.client.stats.unacked === 0, 'everything written and acknowledged', sample);
      await sync(conn);

      expect(maxQueued).toBeGreaterThan(0);
      expect(maxQueued).toBeLessThanOrEqual(LIMIT);
      // Nothing was refused by the queue, so nothing was lost: one accepted and one result per operation, one error per refused desired.
      expect(refusedByQueue(t)).toEqual([]);
      for (const op of ops) {
        expect(framesOf(conn, 'operation.accepted', ofOperation(op.operationId)).map((f) => f.reply_to)).toEqual([op.id]);
        expect(framesOf(conn, 'operation.result', ofOperation(op.operationId)).map((f) => f.reply_to)).toEqual([op.id]);
      }
      expect(framesOf(conn, 'error').map((f) => f.reply_to).sort()).toEqual([...desired].sort());
    } finally {
      clearInterval(sampler);
    }
  });

  it('drops operation.progress at the bound (each drop logged), never the operation.result', async () => {
    const op = manualOperation();
    const { t, conn } = await openStalled({ handlers: { operation: op.handler } });
    // Three accepted waiting: reports must leave the last 2 of the 5 slots to replies.
    const a = startPayload(t);
    const b = startPayload(t);
    const aStart = conn.sendSeq('operation.start', a);
    conn.sendSeq('operation.start', b);
    conn.sendSeq('operation.start', startPayload(t));
    await cursorReaches(t, 3);
    await eventually(() => op.running.size === 3, 'three operations running');
    expect(t.client.stats.queued).toBe(3);

    const ctxA = op.running.get(a.operation_id)!.ctx;
    ctxA.progress('cordoning', 'at the bound 1');
    ctxA.progress('draining', 'at the bound 2');
    ctxA.progress('draining', 'at the bound 3');
    expect(t.client.stats.queued).toBe(3);
    const drops = t.logger.records.filter((r) => /progress dropped/.test(r.msg));
    expect(drops.map((r) => r.operation_id)).toEqual([a.operation_id, a.operation_id, a.operation_id]);
    // Counted, and reported to the hub: a known loss, not a silent one.
    expect(t.client.stats.droppedProgress).toBe(3);
    op.running.get(a.operation_id)!.finish('succeeded');

    await release(t, conn, () => framesOf(conn, 'operation.result').length === 1 && t.client.stats.queued === 0, "a's result");
    await release(t, conn, () => framesOf(conn, 'link.stats').some((f) => f.payload.dropped_progress === 3), 'the drops reported in link.stats');
    // With room again, progress is sent.
    op.running.get(b.operation_id)!.ctx.progress('cordoning', 'with room');
    await release(t, conn, () => framesOf(conn, 'operation.progress').length === 1 && t.client.stats.queued === 0, "b's progress");
    await sync(conn);

    expect(framesOf(conn, 'operation.progress').map((f) => f.payload)).toEqual([
      { operation_id: b.operation_id, phase: 'cordoning', message: 'with room' },
    ]);
    expect(framesOf(conn, 'operation.result').map((f) => ({ reply_to: f.reply_to, ...f.payload }))).toEqual([
      { reply_to: aStart.id, operation_id: a.operation_id, outcome: 'succeeded', message: 'succeeded' },
    ]);
    expect(refusedByQueue(t)).toEqual([]);
  });

  it('defers a conclusion that finds the bound reached, keeps it in the cursor record, and sends it exactly once when room frees', async () => {
    const op = manualOperation();
    const { t, conn } = await openStalled({ handlers: { operation: op.handler } });
    const a = startPayload(t);
    const aStart = conn.sendSeq('operation.start', a);
    for (let i = 0; i < 5; i++) conn.sendSeq('operation.start', startPayload(t));
    // Filled until no hub frame may be applied any more.
    await eventually(() => t.client.stats.transientFailures > 0, 'a start withheld');
    await sync(conn);
    const queued = t.client.stats.queued;
    expect(queued).toBeGreaterThanOrEqual(LIMIT - 2);

    op.running.get(a.operation_id)!.finish('succeeded');
    const waiting = await recordWhere(t.store, a.operation_id, (r) => r.state === 'concluded', "a's conclusion in the record");
    expect(waiting).toMatchObject({ state: 'concluded', delivered: false, conclusion: { frame: 'result', outcome: 'succeeded' } });
    // Not queued: the bound holds, and nothing is refused.
    expect(t.client.stats.queued).toBe(queued);
    await sync(conn);
    expect(framesOf(conn, 'operation.result')).toEqual([]);

    const answered = () => framesOf(conn, 'operation.accepted').length === 6 && framesOf(conn, 'operation.result').length >= 1;
    await release(t, conn, answered, 'room, and the result');
    await release(t, conn, () => t.client.stats.queued === 0 && t.client.stats.unacked === 0, 'everything acknowledged');
    await sync(conn);

    expect(framesOf(conn, 'operation.result').map((f) => ({ reply_to: f.reply_to, ...f.payload }))).toEqual([
      { reply_to: aStart.id, operation_id: a.operation_id, outcome: 'succeeded', message: 'succeeded' },
    ]);
    await recordWhere(t.store, a.operation_id, (r) => r.delivered, 'the record to say delivered');
    expect(refusedByQueue(t)).toEqual([]);
  });

  it('applies no hub frame while fewer than 2 control slots are free, applies it once room frees, and its cursor never passes an unapplied frame', async () => {
    const applied: number[] = [];
    /** The highest seq through which every frame was applied. */
    const appliedThrough = () => {
      let n = 0;
      while (applied.includes(n + 1)) n++;
      return n;
    };
    const violations: string[] = [];
    let t!: TestClient;
    let conn!: HubConnection;
    const watch = () => {
      const through = appliedThrough();
      if (t.client.session.cursor > through) violations.push(`cursor ${t.client.session.cursor} past applied ${through}`);
      if (conn.highestAck > through) violations.push(`ack ${conn.highestAck} past applied ${through}`);
    };
    ({ t, conn } = await openStalled({
      desiredResult: (_p, ctx) => {
        applied.push(ctx.seq);
        return { ok: true };
      },
      handlers: {
        admitOperation: (_p, ctx) => {
          applied.push(ctx.seq);
          return { ok: true };
        },
        operation: () => new Promise(() => {}),
      },
    }));
    const watcher = setInterval(watch, 1);
    try {
      const starts = Array.from({ length: 6 }, () => conn.sendSeq('operation.start', startPayload(t)));
      const desired = conn.sendSeq('deployment.desired', desiredPayload('d1'));
      await eventually(() => applied.length + t.client.stats.transientFailures === desired.seq, 'every frame applied or withheld');
      t.timers.advance(50); // An ack, if one were due.
      await sync(conn);
      watch();

      // Each applied start queued its operation.accepted; at 4 of 5 slots taken the next one waits.
      expect(applied).toEqual([1, 2, 3, 4]);
      expect(t.client.stats.queued).toBe(LIMIT - 1);
      expect(t.client.session.cursor).toBe(4);
      expect(t.calls.desired).toHaveLength(0);
      expect(conn.highestAck).toBeLessThanOrEqual(4);

      await release(t, conn, () => t.client.session.cursor === desired.seq, 'every frame applied', watch);
      t.timers.advance(50);
      await eventually(() => conn.highestAck === desired.seq, `ack ${desired.seq}`);
      await sync(conn);
      watch();

      // Each frame applied once and each start answered once.
      expect([...applied].sort((x, y) => x - y)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(framesOf(conn, 'operation.accepted').map((f) => f.reply_to).sort()).toEqual(starts.map((s) => s.id).sort());
      expect(violations).toEqual([]);
      expect(refusedByQueue(t)).toEqual([]);
    } finally {
      clearInterval(watcher);
    }
  });
});

/**
 * Drop counts reach the hub (spec, Backpressure: an event "dropped ... is counted and reported";
 * MESSAGES.md `link.stats`: sent "whenever a counter changed"). A control frame (an answer to a
 * hub frame, an operation's report) pushed into a full send queue takes the place of the oldest
 * state or event frame, and that loss is counted like any other: the count must reach the hub.
 *
 * The queue fills the way it fills in production: the hub stops acknowledging, so the replay
 * window holds exactly what the session opens with and every later frame waits in the client.
 */
const STATS_QUEUE_CAPACITY = 4;
const STATS_INTERVAL_MS = 5_000;

describe('link.stats under backpressure', () => {
  it('an event evicted from the full queue by a control frame is counted and the count reaches the hub', async () => {
    const t = makeClient(hub, {
      sendQueueCapacity: STATS_QUEUE_CAPACITY,
      statsIntervalMs: STATS_INTERVAL_MS,
      idleTimeoutMs: 3_600_000,
      pingIntervalMs: 3_600_000,
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: OPENING_FRAMES } });
    await readResync(conn);
    await eventually(() => t.client.stats.unacked === OPENING_FRAMES, 'the replay window to fill');

    // The queue fills to its capacity with events: nothing is lost yet.
    for (let i = 0; i < STATS_QUEUE_CAPACITY; i++) {
      t.client.emitEvent('node', { subject: 'node-a', reason: `Reason${i}`, message: '', severity: 'info' });
    }
    expect(t.client.stats.queue.droppedEvents).toBe(0);
    expect(t.client.stats.queued).toBe(STATS_QUEUE_CAPACITY);

    // The hub starts an operation: its operation.accepted and operation.result take the place of
    // the two oldest events.
    conn.sendSeq('operation.start', operationStart(t.timers.now()), { ack: OPENING_FRAMES });
    await eventually(() => t.client.stats.queue.droppedEvents === 2, 'two events to be evicted by the operation reports');

    // The hub catches up: everything flows, and the stats interval passes.
    await eventually(() => {
      const max = maxSeq(conn);
      if (max > conn.highestAckFromHub) conn.send('ack', {}, { ack: max });
      return t.client.stats.queued === 0 && t.client.stats.unacked === 0;
    }, 'the queue to drain');
    t.timers.advance(STATS_INTERVAL_MS * 2);
    await eventually(() => {
      const max = maxSeq(conn);
      if (max > conn.highestAckFromHub) conn.send('ack', {}, { ack: max });
      return conn.frames.some((f) => f.type === 'link.stats' && f.payload.dropped_events === 2);
    }, 'a link.stats reporting the two dropped events');
    const last = conn.frames.filter((f) => f.type === 'link.stats').at(-1);
    expect(last?.payload.dropped_events).toBe(2);
  });
});

/**
 * "When the queue is full and no frame matches the incoming one's type and subject, the oldest
 * frame overall is evicted ... recoverable ... the sender will observe the state again." The SDK
 * observes again with a snapshot, but a snapshot removes a subject at the hub only by leaving it
 * out of a stream that ends complete, and one object the catalog refuses makes every snapshot
 * incomplete (the reason a fresh session queues its unacknowledged removals again). A removal
 * evicted from the full queue must therefore still reach the hub, or the hub keeps a node the
 * cluster no longer has, for good.
 */
describe('a removal evicted from the full send queue', () => {
  it('still reaches the hub after the re-observe snapshot, though that snapshot ends incomplete', async () => {
    const node = (id: string) => ({ ...SNAPSHOT.nodes[0]!, node_id: id, name: id });
    const device = (n: number) => ({ ...SNAPSHOT.devices[0]!, device_id: `GPU-${n}` });
    // The application's observed state; one device the catalog refuses makes every snapshot incomplete.
    const state = {
      cluster: SNAPSHOT.cluster,
      nodes: [node('node-a'), node('node-x')],
      devices: [device(1), { ...device(99), memory_total_mb: -1 }],
      deployments: [],
    };
    const t = makeClient(hub, {
      sendQueueCapacity: STATS_QUEUE_CAPACITY,
      reobserveDelayMs: 1_000,
      idleTimeoutMs: 3_600_000,
      pingIntervalMs: 3_600_000,
      snapshot: () => structuredClone(state),
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // link.stats, resync.begin, cluster, node-a, node-x, GPU-1, stream.end: then the window is full.
    const opening = 7;
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: opening } });
    const first = await readResync(conn);
    expect(first.end.payload).toMatchObject({ complete: false });
    await eventually(() => t.client.stats.unacked === opening, 'the replay window to fill');

    // node-x leaves the cluster; then a burst of device reports fills the queue past its capacity.
    state.nodes = [node('node-a')];
    expect(t.client.removeNode('node-x')).toBe('appended');
    for (let i = 2; i < 2 + STATS_QUEUE_CAPACITY; i++) {
      state.devices.push(device(i));
      t.client.reportDevice(device(i));
    }
    expect(t.client.stats.queue.evictedFrames).toBe(1);

    // The re-observe snapshot follows the eviction; the hub catches up and everything flows.
    t.timers.advance(1_000);
    await eventually(() => {
      const max = maxSeq(conn);
      if (max > conn.highestAckFromHub) conn.send('ack', {}, { ack: max });
      return t.client.stats.queued === 0 && t.client.stats.unacked === 0 && framesOf(conn, 'stream.end').length === 2;
    }, 'the re-observe snapshot and everything queued to reach the hub');
    expect(framesOf(conn, 'stream.end')[1]?.payload).toMatchObject({ complete: false });

    // What the hub believes about node-x, applying the frames in seq order (an incomplete stream prunes nothing).
    let nodeX: 'present' | 'removed' = 'present';
    for (const f of [...conn.frames].filter((f) => f.seq !== null).sort((a, b) => a.seq! - b.seq!)) {
      if (f.payload.node_id !== 'node-x') continue;
      if (f.type === 'node.observed') nodeX = 'present';
      if (f.type === 'node.removed') nodeX = 'removed';
    }
    expect(nodeX).toBe('removed');
  });
});
