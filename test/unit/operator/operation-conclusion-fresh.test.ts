/**
 * An operation's conclusion numbered in a write batch whose link closed before the batch reached
 * the socket (the link went while the batch was being made durable). The writer kept the
 * numbered frame in the replay buffer for a resume but never told the operation book, which went
 * on believing the conclusion queued; when the hub then granted a fresh session (the old buffer
 * discarded), the conclusion was never sent again, neither by the fresh session's re-send of
 * undelivered conclusions nor in answer to the hub's redelivered operation.start (found by a
 * conformance audit, 2026-12-03).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cursorReaches, makeClient, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
import { GatedStore, heldOperations, openSession, operationStart } from './support/operations';
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

describe('an operation conclusion numbered on a link that closed before it was written', () => {
  it('is still reported to the hub after the hub grants a fresh session', async () => {
    const store = new GatedStore();
    const { running, operation } = heldOperations();
    const t = makeClient(hub, {
      cursorStore: store,
      handlers: { operation },
    });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');

    const start = operationStart(t.timers.now(), { kind: 'node.cordon' });
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');

    // The operation concludes while the disk is slow: the write batch carrying its result is
    // numbered and waits for the record's save. The hub goes away meanwhile (a restart).
    store.hold();
    running[0]!('succeeded');
    await eventually(() => store.held > 0, 'the batch to wait for the save');
    conn.terminate();
    await eventually(() => t.client.state === 'waiting', 'the client to notice the lost link');
    store.release();
    await new Promise((r) => setTimeout(r, 20));
    expect(conn.frames.filter((f) => f.type === 'operation.result')).toHaveLength(0);
    // It was numbered: it waits in the replay buffer, for a resume that will not come.
    expect(t.client.session.outbound?.nextSeq).toBeGreaterThan(1);
    expect(store.peek()?.operations.find((o) => o.operationId === start.operation_id)).toMatchObject({ state: 'concluded', delivered: false });

    // The restarted hub knows no session: a fresh one, and the unconcluded operation again.
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    conn2.sendSeq('operation.start', start);
    await cursorReaches(t, 1);
    expect(t.logger.records.some((r) => r.msg.startsWith('redelivered operation.start for a concluded operation'))).toBe(true);

    await eventually(
      () => conn2.frames.find((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id),
      'the operation.result in the fresh session',
      2_000,
    );
    expect(running).toHaveLength(1);
  });
});
