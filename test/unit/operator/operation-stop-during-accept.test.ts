/**
 * A graceful stop that begins while an operation.start is being accepted (its record being saved
 * before the handler runs, or the admission gate still deciding). `abortAll` ran before the
 * operation was running, so its handler then started with a signal nobody aborts: an operation
 * started in a process that is going away, the stop waited out its whole drain timeout for it, and
 * the record was saved with it running. Before the fix: the handler ran with `signal.aborted`
 * false and the stop did not finish until the drain timeout.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OperationContext } from '../../../src/operator/handlers';
import { applied } from '../../../src/operator/handlers';
import { type Payload } from '../../../src/protocol';
import { ackAll, makeClient, type TestClient } from './support/harness';
import { GatedStore, openSession, operationStart } from './support/operations';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

async function open(t: TestClient) {
  clients.push(t);
  const conn = await openSession(hub, t, 'S1');
  await conn.seen((f) => f.type === 'link.stats', 'link.stats');
  ackAll(conn);
  await eventually(() => t.client.stats.unacked === 0, 'everything acked');
  return conn;
}

function handlerRecorder() {
  const started: { ctx: OperationContext; abortedAtStart: boolean }[] = [];
  const operation = (_p: Payload<'operation.start'>, ctx: OperationContext) =>
    new Promise<{ outcome: 'cancelled'; message: string }>((resolve) => {
      started.push({ ctx, abortedAtStart: ctx.signal.aborted });
      const done = () => resolve({ outcome: 'cancelled', message: 'stopped' });
      if (ctx.signal.aborted) done();
      else ctx.signal.addEventListener('abort', done);
    });
  return { started, operation };
}

/** Left to the next process: not started, not accepted, not recorded, not acknowledged. */
function expectLeftToNextProcess(
  store: GatedStore,
  h: ReturnType<typeof handlerRecorder>,
  conn: Awaited<ReturnType<typeof open>>,
  payload: Payload<'operation.start'>,
  frame: { seq: number | null },
): void {
  const saved = store.peek();
  expect({
    started: h.started.length,
    accepted: conn.frames.filter((f) => f.type === 'operation.accepted').length,
    recorded: saved?.operations.some((o) => o.operationId === payload.operation_id),
    cursorBelowStart: (saved?.cursor ?? 0) < (frame.seq as number),
  }).toEqual({ started: 0, accepted: 0, recorded: false, cursorBelowStart: true });
}

describe('a graceful stop that begins while an operation.start is being accepted', () => {
  it('during the save of its record: the handler never runs with a signal nobody aborts', async () => {
    const store = new GatedStore();
    const h = handlerRecorder();
    const t = makeClient(hub, { cursorStore: store, handlers: { operation: h.operation } });
    const conn = await open(t);

    store.hold();
    const payload = operationStart(t.timers.now());
    const frame = conn.sendSeq('operation.start', payload);
    await eventually(() => store.held > 0, 'the record save under way');
    let stopped = false;
    const stopping = t.client.stop({ graceful: true, timeoutMs: 60_000 }).then(() => (stopped = true));
    await eventually(() => t.client.state === 'stopping', 'stopping');
    store.release();

    await new Promise((r) => setTimeout(r, 100));
    expect(h.started.every((s) => s.ctx.signal.aborted), 'every started handler asked to stop').toBe(true);
    // The stop finishes without waiting out its drain timeout (manual timers: never advanced).
    await eventually(() => stopped, 'the stop to finish', 1_000);
    await stopping;
    expectLeftToNextProcess(store, h, conn, payload, frame);
  });

  it('during the admission gate: the handler never runs with a signal nobody aborts', async () => {
    let admit: (() => void) | null = null;
    const h = handlerRecorder();
    const t = makeClient(hub, {
      handlers: {
        operation: h.operation,
        admitOperation: () => new Promise((r) => (admit = () => r(applied()))),
      },
    });
    const conn = await open(t);

    conn.sendSeq('operation.start', operationStart(t.timers.now()));
    await eventually(() => admit !== null, 'the gate deciding');
    let stopped = false;
    const stopping = t.client.stop({ graceful: true, timeoutMs: 60_000 }).then(() => (stopped = true));
    await eventually(() => t.client.state === 'stopping', 'stopping');
    admit!();

    await new Promise((r) => setTimeout(r, 100));
    expect(h.started.every((s) => s.ctx.signal.aborted), 'every started handler asked to stop').toBe(true);
    await eventually(() => stopped, 'the stop to finish', 1_000);
    await stopping;
    expect(h.started).toHaveLength(0);
    expect(conn.frames.filter((f) => f.type === 'operation.accepted')).toHaveLength(0);
  });
});

// The same two moments under a stop that is not graceful (`stop({ graceful: false })`, and the stop
// the client makes itself when its state directory is lost). Only a graceful stop marked the
// operation book as stopping, so before the fix the handler of a start whose gate answered, or
// whose save completed, after such a stop began ran in a client that had stopped: nothing of it
// on disk, its start never acknowledged, and the hub's replay ran it again in the next process.
describe('a stop that is not graceful, begun while an operation.start is being accepted', () => {
  it('during the save of its record: the handler never runs and nothing is accepted', async () => {
    const store = new GatedStore();
    const h = handlerRecorder();
    const t = makeClient(hub, { cursorStore: store, handlers: { operation: h.operation } });
    const conn = await open(t);

    store.hold();
    const payload = operationStart(t.timers.now());
    const frame = conn.sendSeq('operation.start', payload);
    await eventually(() => store.held > 0, 'the record save under way');
    const stopping = t.client.stop({ graceful: false });
    await eventually(() => t.client.state === 'stopping', 'stopping');
    store.release();
    await stopping;
    await new Promise((r) => setTimeout(r, 100));

    expectLeftToNextProcess(store, h, conn, payload, frame);
  });

  it('during the admission gate, answered after the stop resolved: the handler never runs', async () => {
    let admit: (() => void) | null = null;
    const h = handlerRecorder();
    const t = makeClient(hub, {
      handlers: {
        operation: h.operation,
        admitOperation: () => new Promise((r) => (admit = () => r(applied()))),
      },
    });
    const conn = await open(t);

    conn.sendSeq('operation.start', operationStart(t.timers.now()));
    await eventually(() => admit !== null, 'the gate deciding');
    await t.client.stop({ graceful: false });
    admit!();
    await new Promise((r) => setTimeout(r, 100));

    expect(h.started).toHaveLength(0);
    expect(conn.frames.filter((f) => f.type === 'operation.accepted')).toHaveLength(0);
  });
});
