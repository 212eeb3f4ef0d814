/**
 * A running operation's `operation.accepted` that the hub had not acknowledged when the hub
 * granted a fresh session: the fresh session discards the replay buffer that held it, and the
 * hub redelivers the open operation's start. The SDK dropped that redelivery in silence (the
 * operation was running), so the hub showed work that was running as never accepted until its
 * result came, and the redelivered start, a request, was never answered (found by a review of
 * the operations lifecycle, 2026-12-07). It is accepted again now, and still run only once.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cursorReaches, makeClient, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
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

describe('a running operation redelivered in a fresh session', () => {
  it('is accepted again in answer to the redelivered start, and not run a second time', async () => {
    const { running, operation } = heldOperations();
    const t = makeClient(hub, { handlers: { operation } });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');

    const start = operationStart(t.timers.now(), { kind: 'node.drain' });
    conn.sendSeq('operation.start', start);
    const first = await conn.nextOf('operation.accepted');
    await eventually(() => running.length === 1, 'the operation to run');
    // The hub goes away before it acknowledges the accepted (never acked here), and comes back
    // knowing no session.
    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);

    const redelivery = conn2.sendSeq('operation.start', start);
    await cursorReaches(t, 1);
    const again = await eventually(
      () => conn2.frames.find((f) => f.type === 'operation.accepted' && f.payload.operation_id === start.operation_id),
      'operation.accepted in the fresh session',
      2_000,
    );
    expect(again.reply_to).toBe(redelivery.id);
    expect(again.reply_to).not.toBe(first.reply_to);
    expect(running).toHaveLength(1);

    // A second copy of the start in the same session (its replay after a resume) is dropped: the
    // accepted is already numbered in this session's stream.
    conn2.sendSeq('operation.start', start);
    await cursorReaches(t, 2);
    await new Promise((r) => setTimeout(r, 50));
    expect(conn2.frames.filter((f) => f.type === 'operation.accepted')).toHaveLength(1);

    // Its conclusion still goes once, in the fresh session.
    running[0]!('succeeded');
    await eventually(() => conn2.frames.find((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id), 'the result', 2_000);
    expect(running).toHaveLength(1);
  });
});
