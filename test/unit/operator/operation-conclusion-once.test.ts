/**
 * An operation's conclusion goes to the hub once per session. Each of these sent it twice: the
 * hub keeps the first and files every later one as another entry of the operation's history
 * (GET /admin/operations/{id}), so one run read as two results (found by review; each test fails
 * on the code before):
 * - a process that continues the session (a crash or a stop whose drain ran out) replayed the
 *   result from its outbound log and queued it again from its record;
 * - after a restart into a fresh session, the result the record re-sent was sent again in answer
 *   to the hub's redelivery of the operation's start;
 * - a start applied behind a hole, replayed by the resume that the hole made necessary, was
 *   answered again while the resume replayed the result it had already been answered with.
 * And a conclusion reached while the link is down is saved at once (last describe).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore, MemoryCursorStore } from '../../../src/operator/cursor-store';
import { applied, transient } from '../../../src/operator/handlers';
import { FileOutboundLog } from '../../../src/operator/outbound-log';
import { desiredPayload, makeClient, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
import { heldOperations, openSession, operationStart } from './support/operations';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'operation-conclusion-once-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const resultsOf = (conn: HubConnection, operationId: string) =>
  conn.frames.filter((f) => f.type === 'operation.result' && f.payload.operation_id === operationId);

/**
 * A start whose deadline has passed, answered at once with an error: a control frame queued
 * before that answer (a second conclusion) is written before it, so once it is seen nothing is
 * still to come.
 */
async function barrier(conn: HubConnection, now: number): Promise<void> {
  const { id } = conn.sendSeq('operation.start', operationStart(now, { deadline: new Date(now - 1).toISOString() }));
  await conn.seen((f) => f.type === 'error' && f.reply_to === id, 'the answer to a start past its deadline');
}

/**
 * A start run to its result by the held handler; with `ack`, the hub acknowledges the result and
 * a barrier makes sure the client read that ack. `s`: the start frame as sent (its id and seq).
 */
async function runToResult(conn: HubConnection, t: TestClient, running: ((outcome: 'succeeded') => void)[], ack = false) {
  const start = operationStart(t.timers.now());
  const s = conn.sendSeq('operation.start', start);
  await conn.nextOf('operation.accepted');
  await eventually(() => running.length === 1, 'the operation to run');
  running[0]!('succeeded');
  const result = await conn.nextOf('operation.result');
  if (ack) {
    conn.send('ack', {}, { ack: result.seq as number });
    await barrier(conn, t.timers.now()); // the ack is read before the frame after it
  }
  return { start, s, result };
}

/** A process started from `store` (after a crash) and welcomed into a fresh session S2, its resync read. */
async function restartFresh(store: MemoryCursorStore): Promise<{ next: TestClient; conn: HubConnection }> {
  const next = makeClient(hub, { cursorStore: store });
  clients.push(next);
  await next.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S2', full_resync: true });
  await readResync(conn);
  return { next, conn };
}

describe("an operation's conclusion is sent once per session", () => {
  it('a process that continues the session replays the result from its log and does not queue it again', async () => {
    const files = async () => ({ cursorStore: new FileCursorStore(path.join(dir, 'cursor.json')), outboundLog: await FileOutboundLog.open(path.join(dir, 'outbound.log')) });
    const { running, operation } = heldOperations();
    const first = makeClient(hub, { ...(await files()), handlers: { operation } });
    clients.push(first);
    const conn = await openSession(hub, first, 'S1');
    const start = operationStart(first.timers.now());
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');
    running[0]!('succeeded');
    const result = await conn.nextOf('operation.result');
    // The process dies before the hub acknowledges the result.
    conn.terminate();
    await first.client.stop({ graceful: false });

    const second = makeClient(hub, await files());
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: (result.seq as number) - 1 });
    await readResync(conn2);
    conn2.seqFrom(2);
    await barrier(conn2, second.timers.now());
    expect(resultsOf(conn2, start.operation_id).map((f) => f.id)).toEqual([result.id]);

    // Acknowledged by the replay's ack, it is delivered: a later restart does not send it again.
    const lastSeq = Math.max(...conn2.frames.map((f) => f.seq ?? 0));
    conn2.send('ack', {}, { ack: lastSeq });
    await eventually(() => second.client.stats.unacked === 0, 'everything acknowledged');
    await second.client.stop();
    const third = makeClient(hub, await files());
    clients.push(third);
    await third.client.start();
    const conn3 = await hub.nextConnection();
    await conn3.nextOf('hello');
    conn3.welcome({ session_id: 'S1', full_resync: false, ack_seq: lastSeq });
    await readResync(conn3);
    conn3.seqFrom(3);
    await barrier(conn3, third.timers.now());
    expect(resultsOf(conn3, start.operation_id)).toHaveLength(0);
  });

  it('after a restart into a fresh session, the result sent from the record is not sent again for the redelivered start', async () => {
    const store = new MemoryCursorStore();
    const { running, operation } = heldOperations();
    const first = makeClient(hub, { cursorStore: store, handlers: { operation } });
    clients.push(first);
    const conn = await openSession(hub, first, 'S1');
    const start = operationStart(first.timers.now());
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');
    await first.client.stop({ graceful: false }); // a crash as far as the operation is concerned

    const { next: second, conn: conn2 } = await restartFresh(store);
    await conn2.seen((f) => f.type === 'operation.result', 'the interrupted operation concluded');
    // The hub delivers the operation it has no conclusion for again, in a new start.
    conn2.sendSeq('operation.start', start);
    await barrier(conn2, second.timers.now());
    const results = resultsOf(conn2, start.operation_id);
    expect(results).toHaveLength(1);
    expect(results[0]!.payload).toMatchObject({ outcome: 'failed' });
  });

  it('a start applied behind a hole and replayed by the resume is not answered again', async () => {
    let desiredFails = true;
    const { running, operation } = heldOperations();
    const t = makeClient(hub, { handlers: { operation }, desiredResult: () => (desiredFails ? transient('not yet') : applied()) });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');
    const desired = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const start = operationStart(t.timers.now());
    const s = conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run behind the hole');
    running[0]!('succeeded');
    const result = await conn.nextOf('operation.result');
    expect(t.client.session.cursor).toBe(0);

    // The link drops before the retry; the resume replays both frames, the hole now applies.
    conn.terminate();
    desiredFails = false;
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: (result.seq as number) - 1 });
    conn2.sendSeq('deployment.desired', desiredPayload('d1'), { id: desired.id });
    conn2.sendSeq('operation.start', start, { id: s.id });
    await barrier(conn2, t.timers.now());
    expect(resultsOf(conn2, start.operation_id).map((f) => f.id)).toEqual([result.id]);
    expect(running).toHaveLength(1);
  });

  it('a start behind a hole whose result the hub acknowledged before the link dropped is not answered again by the replay', async () => {
    // Before, the acknowledgement took the result out of what is "on its way", and the replayed
    // start was answered with a second result: one run filed twice, at every resume while the
    // hole stayed.
    let desiredFails = true;
    const { running, operation } = heldOperations();
    const t = makeClient(hub, { handlers: { operation }, desiredResult: () => (desiredFails ? transient('not yet') : applied()) });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');
    const desired = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const { start, s, result } = await runToResult(conn, t, running, true);

    conn.terminate();
    desiredFails = false;
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: result.seq as number });
    conn2.sendSeq('deployment.desired', desiredPayload('d1'), { id: desired.id });
    conn2.sendSeq('operation.start', start, { id: s.id });
    await barrier(conn2, t.timers.now());
    expect(resultsOf(conn2, start.operation_id)).toEqual([]);
    expect(running).toHaveLength(1);
  });

  it('after a restart into a fresh session, a redelivered start that carries the ack of the re-sent result is not answered again', async () => {
    // The hub read the operation as open before it stored the result the record re-sent, so it
    // delivers the start again, numbered after that store: its envelope acknowledges the result
    // before the start is dispatched.
    const store = new MemoryCursorStore();
    const { running, operation } = heldOperations();
    const first = makeClient(hub, { cursorStore: store, handlers: { operation } });
    clients.push(first);
    const conn = await openSession(hub, first, 'S1');
    const start = operationStart(first.timers.now());
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');
    await first.client.stop({ graceful: false });

    const { next: second, conn: conn2 } = await restartFresh(store);
    const result = await conn2.seen((f) => f.type === 'operation.result', 'the interrupted operation concluded');
    conn2.sendSeq('operation.start', start, { ack: result.seq as number });
    await barrier(conn2, second.timers.now());
    expect(resultsOf(conn2, start.operation_id)).toHaveLength(1);
  });

  it('a start redelivered in a later session than the one whose hub acknowledged the result is answered again (a hub that sends it holds no answer: a database restored)', async () => {
    const store = new MemoryCursorStore();
    const { running, operation } = heldOperations();
    const t = makeClient(hub, { cursorStore: store, handlers: { operation } });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');
    const { start } = await runToResult(conn, t, running, true);

    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    conn2.sendSeq('operation.start', start);
    await barrier(conn2, t.timers.now());
    const again = resultsOf(conn2, start.operation_id);
    expect(again).toHaveLength(1);
    expect(again[0]!.payload).toMatchObject({ outcome: 'succeeded' });
    expect(running).toHaveLength(1);
  });

  it('a process that continues the session knows which session acknowledged the result: the replayed start behind a hole is not answered again', async () => {
    const files = async () => ({ cursorStore: new FileCursorStore(path.join(dir, 'cursor.json')), outboundLog: await FileOutboundLog.open(path.join(dir, 'outbound.log')) });
    let desiredFails = true;
    const { running, operation } = heldOperations();
    const first = makeClient(hub, { ...(await files()), handlers: { operation }, desiredResult: () => (desiredFails ? transient('not yet') : applied()) });
    clients.push(first);
    const conn = await openSession(hub, first, 'S1');
    const desired = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const { start, s, result } = await runToResult(conn, first, running, true);
    conn.terminate();
    await first.client.stop({ graceful: false });

    desiredFails = false;
    const second = makeClient(hub, await files());
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0, lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: result.seq as number });
    conn2.sendSeq('deployment.desired', desiredPayload('d1'), { id: desired.id });
    conn2.sendSeq('operation.start', start, { id: s.id });
    await barrier(conn2, second.timers.now());
    expect(resultsOf(conn2, start.operation_id)).toEqual([]);
  });
});

describe('a conclusion reached while the link is down', () => {
  it('is saved as concluded before the next dial, and a crash then reports its real outcome', async () => {
    // The writer saves the record only while a link is open: the conclusion waited for the next
    // dial, up to the backoff's cap, and a crash meanwhile left it "running", which the next
    // process reported as interrupted (failed). Found by review; fails on the code before.
    const { running, operation } = heldOperations();
    const t = makeClient(hub, { handlers: { operation } });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');
    const start = operationStart(t.timers.now());
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');
    conn.terminate();
    await eventually(() => t.client.state === 'waiting', 'the backoff');
    running[0]!('succeeded');
    // The reconnect timer is manual and never advanced: the client stays in its backoff.
    const saved = async () => (await t.store.load())?.operations.find((o) => o.operationId === start.operation_id);
    for (let waited = 0; (await saved())?.state !== 'concluded'; waited += 20) {
      if (waited > 5_000) throw new Error(`the conclusion was not saved during the backoff: ${JSON.stringify(await saved())}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    // A crash now: the next process starts from what is saved.
    const copy = new MemoryCursorStore();
    await copy.save((await t.store.load())!);
    const { conn: conn2 } = await restartFresh(copy);
    const result = await conn2.seen((f) => f.type === 'operation.result', 'the conclusion re-sent');
    expect(result.payload).toMatchObject({ operation_id: start.operation_id, outcome: 'succeeded' });
  });
});
