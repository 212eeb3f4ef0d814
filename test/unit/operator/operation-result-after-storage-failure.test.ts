/**
 * An operation's conclusion numbered in a write batch whose durable save failed (a full or
 * failing disk). The writer returned from its catch branch without telling the operation book the
 * conclusion's seq, so the book went on believing it queued; the failed batch made the session
 * lossy, the hub granted a fresh session (the numbered frame discarded with the old buffer), and
 * neither the fresh session's re-send of undelivered conclusions nor the answer to the hub's
 * redelivered operation.start ever sent it again. Before the fix: no operation.result in S2.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore, type DurableRecord } from '../../../src/operator/cursor-store';
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

/** A cursor store whose next save can be made to fail once. */
class FailingStore extends MemoryCursorStore {
  failNext = false;
  failed = 0;
  override async save(record: DurableRecord): Promise<void> {
    if (this.failNext) {
      this.failNext = false;
      this.failed++;
      throw new Error('ENOSPC: no space left on device');
    }
    return super.save(record);
  }
}

describe('an operation conclusion in a write batch whose save failed', () => {
  it('is still reported to the hub in the fresh session that follows', async () => {
    const store = new FailingStore();
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

    // The save of the batch carrying the result fails: nothing of it is written, the link closes.
    store.failNext = true;
    running[0]!('succeeded');
    await eventually(() => store.failed > 0, 'the failed save');
    await conn.waitClosed();
    expect(conn.frames.filter((f) => f.type === 'operation.result')).toHaveLength(0);

    // The next hello says lossy: the hub grants a fresh session and redelivers the start.
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload.lossy).toBe(true);
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    conn2.sendSeq('operation.start', start);
    await cursorReaches(t, 1);

    await eventually(
      () => conn2.frames.find((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id),
      'the operation.result in the fresh session',
      2_000,
    );
    expect(running).toHaveLength(1);
  });
});
