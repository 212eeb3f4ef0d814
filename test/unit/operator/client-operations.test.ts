import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import type { OperationContext } from '../../../src/operator/handlers';
import { newId, ULID_RE, type Payload } from '../../../src/protocol';
import { permanent } from '../../../src/operator/handlers';
import { ackAll, cursorReaches, desiredPayload, makeClient, readResync, type TestClient } from './support/harness';
import { GatedStore } from './support/operations';
import { eventually, ScriptedHub, type HubConnection, type SeenFrame } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

async function open(options: Parameters<typeof makeClient>[1] = {}, sessionId = 'S1') {
  const t = makeClient(hub, options);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: sessionId });
  await readResync(conn);
  return { t, conn };
}

function start(t: TestClient, overrides: Partial<Payload<'operation.start'>> = {}): Payload<'operation.start'> {
  return {
    operation_id: newId(),
    kind: 'node.drain',
    target: 'node-a',
    params: { grace_period_s: 30 },
    deadline: new Date(t.timers.now() + 600_000).toISOString(),
    ...overrides,
  };
}

/** An operation handler the test concludes by hand. */
function manualOperation() {
  const running: { payload: Payload<'operation.start'>; ctx: OperationContext; finish: (outcome: 'succeeded' | 'failed' | 'cancelled') => void }[] = [];
  const handler = (payload: Payload<'operation.start'>, ctx: OperationContext) =>
    new Promise<{ outcome: 'succeeded' | 'failed' | 'cancelled'; message: string }>((resolve) => {
      running.push({ payload, ctx, finish: (outcome) => resolve({ outcome, message: outcome }) });
    });
  return { running, handler };
}

const framesOf = (conn: HubConnection, type: string) => conn.frames.filter((f) => f.type === type);

describe('operations', () => {
  it('accepts, reports progress and concludes, every report replying to the start', async () => {
    const op = manualOperation();
    const { t, conn } = await open({ handlers: { operation: op.handler } });
    const payload = start(t);
    const { id } = conn.sendSeq('operation.start', payload);
    const accepted = await conn.nextOf('operation.accepted');
    expect(accepted).toMatchObject({ reply_to: id, payload: { operation_id: payload.operation_id } });
    await eventually(() => op.running.length === 1, 'handler running');
    op.running[0]!.ctx.progress('cordoning', 'node-a cordoned');
    const progress = await conn.nextOf('operation.progress');
    expect(progress).toMatchObject({ reply_to: id, payload: { phase: 'cordoning', message: 'node-a cordoned' } });
    op.running[0]!.finish('succeeded');
    const result = await conn.nextOf('operation.result');
    expect(result).toMatchObject({ reply_to: id, payload: { operation_id: payload.operation_id, outcome: 'succeeded' } });
    await cursorReaches(t, 1);
  });

  it("a conclusion or an answer over the hub's max_frame_bytes (4 KiB, the least a hub may advertise) goes with its message cut to fit, never dropped", async () => {
    // 2,040 characters (within the 2,048 a message holds), 6 KB of UTF-8.
    const long = '节点排空失败'.repeat(340);
    const t = makeClient(hub, { handlers: { operation: async () => ({ outcome: 'failed', message: long }) }, desiredResult: () => permanent(long) });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', limits: { max_frame_bytes: 4096 } });
    await readResync(conn);
    const p = start(t);
    conn.sendSeq('operation.start', p);
    const result = await conn.seen((f) => f.type === 'operation.result', 'the conclusion');
    const d = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const refusal = await conn.seen((f) => f.type === 'error' && f.reply_to === d.id, 'the refusal');
    for (const f of [result, refusal]) {
      expect(Buffer.byteLength(f.raw)).toBeLessThanOrEqual(4096);
      const message = String(f.payload.message);
      expect(message.length).toBeGreaterThan(100);
      expect(long.startsWith(message)).toBe(true);
    }
    expect(result.payload).toMatchObject({ operation_id: p.operation_id, outcome: 'failed' });
    expect(t.client.stats.oversizeFrames).toBe(0);
  });

  it('drops a redelivery of a running operation, and of a concluded one whose result the hub acknowledged in this session', async () => {
    const op = manualOperation();
    const { t, conn } = await open({ handlers: { operation: op.handler } });
    const payload = start(t);
    conn.sendSeq('operation.start', payload);
    await eventually(() => op.running.length === 1, 'running');
    conn.sendSeq('operation.start', payload);
    await cursorReaches(t, 2);
    expect(op.running).toHaveLength(1);
    expect(framesOf(conn, 'operation.accepted')).toHaveLength(1);

    op.running[0]!.finish('failed');
    await conn.nextOf('operation.result');
    // Acknowledged in this session: the hub holds the answer, and a second would be filed as a
    // second report of the one run (operation-conclusion-once.test.ts; a later session's
    // redelivery is answered again there).
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'the result acknowledged');
    conn.sendSeq('operation.start', payload);
    // A start past its deadline is answered at once: a result queued for the redelivery before it
    // would be written before that answer.
    const barrier = conn.sendSeq('operation.start', start(t, { deadline: new Date(t.timers.now() - 1).toISOString() }));
    await eventually(() => conn.frames.some((f) => f.type === 'error' && f.reply_to === barrier.id), 'the answer to a start past its deadline');
    expect(framesOf(conn, 'operation.result')).toHaveLength(1);
    expect(op.running).toHaveLength(1);
  });

  it('a restart neither re-runs a concluded operation nor forgets to report an interrupted one', async () => {
    const store = new MemoryCursorStore();
    const op = manualOperation();
    const { t, conn } = await open({ cursorStore: store, handlers: { operation: op.handler } });
    const done = start(t);
    const interrupted = start(t, { kind: 'model.prefetch', target: 'meta/llama' });
    conn.sendSeq('operation.start', done);
    conn.sendSeq('operation.start', interrupted);
    await eventually(() => op.running.length === 2, 'both running');
    op.running[0]!.finish('succeeded');
    await conn.nextOf('operation.result');
    await cursorReaches(t, 2);
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'everything acknowledged');
    await t.client.stop({ graceful: false }); // A crash as far as the operation is concerned.

    const op2 = manualOperation();
    const again = makeClient(hub, { cursorStore: store, handlers: { operation: op2.handler } });
    clients.push(again);
    await again.client.start();
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    // The in-memory replay buffer died with the process: a fresh session, as hello asked.
    conn2.welcome({ session_id: 'S2', full_resync: true });
    const redelivered = conn2.sendSeq('operation.start', done);
    const results = await eventually(() => framesOf(conn2, 'operation.result').length >= 2 && framesOf(conn2, 'operation.result'), 'results');
    expect(op2.running).toHaveLength(0);
    const byOp = Object.fromEntries(results.map((r) => [r.payload.operation_id as string, r]));
    expect(byOp[interrupted.operation_id]).toMatchObject({ payload: { outcome: 'failed' } });
    expect(byOp[done.operation_id]).toMatchObject({ reply_to: redelivered.id, payload: { outcome: 'succeeded' } });
  });

  it('answers error {code: deadline} when the deadline has passed or passes while running', async () => {
    const op = manualOperation();
    const { t, conn } = await open({ handlers: { operation: op.handler } });
    const late = conn.sendSeq('operation.start', start(t, { deadline: new Date(t.timers.now() - 1).toISOString() }));
    const err = await conn.nextOf('error');
    expect(err).toMatchObject({ reply_to: late.id, payload: { code: 'deadline', retryable: false } });
    expect(op.running).toHaveLength(0);

    const slow = conn.sendSeq('operation.start', start(t, { deadline: new Date(t.timers.now() + 5_000).toISOString() }));
    await eventually(() => op.running.length === 1, 'running');
    t.timers.advance(5_000);
    const err2 = await conn.nextOf('error');
    expect(err2).toMatchObject({ reply_to: slow.id, payload: { code: 'deadline' } });
    expect(op.running[0]!.ctx.signal.aborted).toBe(true);
    op.running[0]!.finish('cancelled');
    await new Promise((r) => setTimeout(r, 10));
    expect(framesOf(conn, 'operation.result')).toHaveLength(0);
  });

  it('a start whose deadline passes while its record is being saved is answered with the deadline error, not run', async () => {
    const store = new GatedStore();
    const { t, conn } = await open({ cursorStore: store });
    store.hold();
    const late = conn.sendSeq('operation.start', start(t, { deadline: new Date(t.timers.now() + 5_000).toISOString() }));
    await eventually(() => store.held > 0, 'the record save under way');
    t.timers.advance(5_000); // a slow disk: the deadline passes during the save
    store.release();
    const err = await conn.seen((f) => f.type === 'error' && f.reply_to === late.id, 'the deadline error');
    expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });
    await cursorReaches(t, 1);
    expect(t.calls.operations).toHaveLength(0);
    expect(framesOf(conn, 'operation.accepted')).toHaveLength(0);
    expect(framesOf(conn, 'operation.result')).toHaveLength(0);
  });

  it('answers a start queued behind a hung desired handler with error {code: deadline} at its deadline, and never runs it', async () => {
    const store = new MemoryCursorStore();
    let release!: () => void;
    const hung = new Promise<void>((r) => (release = r));
    const { t, conn } = await open({
      cursorStore: store,
      desiredResult: async () => {
        await hung;
        return { ok: true };
      },
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t.calls.desired.length === 1, 'the desired handler running');
    const payload = start(t, { deadline: new Date(t.timers.now() + 5_000).toISOString() });
    const queued = conn.sendSeq('operation.start', payload);
    const answers = () => conn.frames.filter((f) => f.type === 'error' && f.reply_to === queued.id);

    t.timers.advance(4_999);
    await new Promise((r) => setTimeout(r, 20));
    expect(answers(), 'nothing before the deadline').toHaveLength(0);
    t.timers.advance(1);
    const [err] = await eventually(() => answers().length === 1 && answers(), 'the deadline error at the deadline');
    expect(err).toMatchObject({ reply_to: queued.id, payload: { code: 'deadline', retryable: false } });
    // Recorded as the operation's conclusion before the answer went out.
    expect(store.peek()?.operations.find((r) => r.operationId === payload.operation_id)).toMatchObject({
      state: 'concluded',
      conclusion: { frame: 'error', code: 'deadline' },
    });
    expect(t.client.session.cursor, 'the desired handler still holds the stream').toBe(0);

    // Its turn: settled and acknowledged in order, not run, not answered twice.
    release();
    await cursorReaches(t, 2);
    await new Promise((r) => setTimeout(r, 20));
    expect(t.calls.operations).toHaveLength(0);
    expect(answers()).toHaveLength(1);
    expect(framesOf(conn, 'operation.accepted')).toHaveLength(0);

    // A redelivery re-sends the conclusion, and still runs nothing.
    const again = conn.sendSeq('operation.start', payload);
    const resent = await conn.seen((f) => f.type === 'error' && f.reply_to === again.id, 'the conclusion re-sent');
    expect(resent.payload).toMatchObject({ code: 'deadline' });
    expect(t.calls.operations).toHaveLength(0);
  });

  it('an admission gate can withhold (transient) or refuse (permanent) an operation', async () => {
    let verdict: 'transient' | 'permanent' | 'ok' = 'transient';
    const { t, conn } = await open({
      handlers: {
        admitOperation: () =>
          verdict === 'ok'
            ? { ok: true }
            : verdict === 'transient'
              ? { ok: false, retryable: true, reason: 'node API unreachable' }
              : { ok: false, retryable: false, reason: 'no such node' },
      },
    });
    conn.sendSeq('operation.start', start(t));
    await eventually(() => t.client.stats.transientFailures === 1, 'withheld');
    expect(t.client.session.cursor).toBe(0);
    verdict = 'ok';
    t.timers.advance(500);
    await conn.nextOf('operation.accepted');
    verdict = 'permanent';
    const refused = conn.sendSeq('operation.start', start(t));
    const err = await conn.nextOf('error');
    expect(err).toMatchObject({ reply_to: refused.id, payload: { code: 'invalid', retryable: false, message: 'no such node' } });
    await cursorReaches(t, 2);
  });
});

/** Read and acknowledge frames one by one (a window of one frame) until `pred` holds. */
async function drainOneByOne(conn: HubConnection, pred: (f: SeenFrame) => boolean): Promise<SeenFrame> {
  for (;;) {
    const f = await conn.next();
    if (f.seq !== null) conn.send('ack', {}, { ack: f.seq });
    if (pred(f)) return f;
  }
}

describe('link.stats', () => {
  it('reports queue drops after the session opens and when they change, at most once per interval', async () => {
    const t = makeClient(hub, { sendQueueCapacity: 2, statsIntervalMs: 5_000 });
    clients.push(t);
    await t.client.start();
    // Disconnected: the application keeps reporting; the queue keeps its bound and counts.
    const flap = (n: number) => t.client.emitEvent('node', { subject: 'node-a', reason: 'Flap', message: `${n}`, severity: 'info' });
    for (let i = 0; i < 5; i++) flap(i);
    expect(t.client.stats.queue.droppedEvents).toBe(3);
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // A window of one unacknowledged frame: the hub's limit, respected by the writer.
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: 1 } });
    const first = await drainOneByOne(conn, (f) => f.type === 'link.stats');
    expect(first.payload).toMatchObject({ dropped_events: 3, evicted_frames: 0, replaced_frames: 0 });
    expect(first.payload.epoch).toMatch(ULID_RE);
    // The snapshot went first, whole; never more than one frame was unacknowledged.
    expect(framesOf(conn, 'stream.end')).toHaveLength(1);
    expect(conn.frames.filter((f) => f.seq !== null && f.seq > conn.highestAckFromHub).length).toBeLessThanOrEqual(1);

    // Stall the window (the last frame stays unacked), then overflow the queue again.
    for (let i = 10; i < 20; i++) flap(i);
    const dropped = t.client.stats.queue.droppedEvents;
    expect(dropped).toBeGreaterThan(3);
    // Nothing more is reported before the interval has passed…
    await new Promise((r) => setTimeout(r, 10));
    expect(framesOf(conn, 'link.stats')).toHaveLength(1);
    // …and then the new totals, under the same epoch.
    t.timers.advance(5_000);
    const second = await drainOneByOne(conn, (f) => f.type === 'link.stats');
    expect(second.payload).toMatchObject({ epoch: first.payload.epoch });
    expect(second.payload.dropped_events).toBeGreaterThanOrEqual(dropped);
  });
});
