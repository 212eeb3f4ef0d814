/**
 * An operation's conclusion numbered under session S1 in a batch whose outbound-log sync is slow;
 * the link goes and the hub grants a fresh session S2 (numbering restarts at 1) before the sync
 * returns. The book learnt the conclusion's S1 seq only after the fresh session had cleared its
 * seq map, so it kept that S1 seq and read S2's acks against it: the conclusion was never sent in
 * S2 and, once S2's acks passed that number, was recorded as delivered (lost for good, even across
 * a restart). Before the fix: no operation.result in S2 and the record said delivered.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { ackAll, makeClient, readResync, reconnectAfterBackoff, SlowOutboundLog, type TestClient } from './support/harness';
import { heldOperations, openSession, operationStart } from './support/operations';
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

describe('an operation conclusion whose batch was still syncing when a fresh session began', () => {
  it('is sent in the fresh session and is not counted delivered by its acks', async () => {
    const store = new MemoryCursorStore();
    const log = new SlowOutboundLog();
    const { running, operation } = heldOperations();
    const t = makeClient(hub, {
      cursorStore: store,
      outboundLog: log,
      handlers: { operation },
    });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');

    const start = operationStart(t.timers.now(), { kind: 'node.cordon' });
    const startFrame = conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');

    // The batch carrying the result is numbered and its log sync stalls; the hub goes away.
    log.hold();
    running[0]!('succeeded');
    await eventually(() => log.held > 0, 'the batch to wait for the sync');
    conn.terminate();

    // The hub (restarted) grants a fresh session before the stalled sync returns.
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await eventually(() => t.client.session.sessionId === 'S2', 'the fresh session');
    log.release();
    await readResync(conn2);
    // The hub acknowledges everything it received in S2.
    ackAll(conn2);
    await eventually(() => t.client.stats.unacked === 0, 'S2 acknowledged');
    await new Promise((r) => setTimeout(r, 20));

    const result = await eventually(
      () => conn2.frames.find((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id),
      'the operation.result in the fresh session',
      1_000,
    ).catch(() => undefined);
    expect(result, 'operation.result sent in S2').toBeDefined();
    expect(result).toMatchObject({ reply_to: startFrame.id, payload: { outcome: 'succeeded' } });
    expect(running).toHaveLength(1);
  });
});
