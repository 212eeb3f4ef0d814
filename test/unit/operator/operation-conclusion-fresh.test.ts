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
import { MemoryCursorStore, type DurableRecord } from '../../../src/operator/cursor-store';
import type { OperationContext } from '../../../src/operator/handlers';
import { newId, type Payload } from '../../../src/protocol';
import { cursorReaches, makeClient, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
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

/** A cursor store whose saves can be held (a slow disk). */
class GatedStore extends MemoryCursorStore {
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  held = 0;
  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }
  release(): void {
    this.open?.();
    this.gate = null;
  }
  override async save(record: DurableRecord): Promise<void> {
    if (this.gate) {
      this.held++;
      await this.gate;
    }
    return super.save(record);
  }
}

describe('an operation conclusion numbered on a link that closed before it was written', () => {
  it('is still reported to the hub after the hub grants a fresh session', async () => {
    const store = new GatedStore();
    const running: ((outcome: 'succeeded') => void)[] = [];
    const t = makeClient(hub, {
      cursorStore: store,
      handlers: {
        operation: (_p: Payload<'operation.start'>, _ctx: OperationContext) =>
          new Promise((resolve) => running.push((outcome) => resolve({ outcome, message: 'done' }))),
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);

    const start: Payload<'operation.start'> = {
      operation_id: newId(),
      kind: 'node.cordon',
      target: 'node-a',
      params: {},
      deadline: new Date(t.timers.now() + 600_000).toISOString(),
    };
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
