/**
 * A graceful stop while the hub is unreachable, with an operation running. The drain counted
 * itself done at once (no link: nothing to drain) and saved the final record before the aborted
 * handler's conclusion landed, so the record kept the operation `running`; the conclusion the
 * handler reached a moment later was never saved, and the next process reported the operation
 * `failed` ("the operator restarted while the operation was running") instead of what it was.
 * Before the fix: the saved record said `running` and the restart reported `failed`.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import type { OperationContext } from '../../../src/operator/handlers';
import { type Payload } from '../../../src/protocol';
import { makeClient, type TestClient } from './support/harness';
import { openSession, operationStart } from './support/operations';
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

describe('a graceful stop while the hub is unreachable', () => {
  it('lets a running operation answer its abort and keeps that conclusion for the next process', async () => {
    const store = new MemoryCursorStore();
    const started: OperationContext[] = [];
    const t = makeClient(hub, {
      cursorStore: store,
      handlers: {
        operation: (_p: Payload<'operation.start'>, ctx: OperationContext) =>
          new Promise((resolve) => {
            started.push(ctx);
            ctx.signal.addEventListener('abort', () => resolve({ outcome: 'cancelled', message: 'stopped by the operator' }));
          }),
      },
    });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');

    const start = operationStart(t.timers.now());
    conn.sendSeq('operation.start', start);
    await conn.nextOf('operation.accepted');
    await eventually(() => started.length === 1, 'the operation to run');

    // The hub goes away; the operator is told to stop before it gets back.
    conn.terminate();
    await eventually(() => t.client.state === 'waiting', 'the client to notice the lost link');
    await t.client.stop({ graceful: true, timeoutMs: 5_000 });
    expect(started[0]!.signal.aborted).toBe(true);

    const saved = store.peek()?.operations.find((o) => o.operationId === start.operation_id);
    expect(saved).toMatchObject({ state: 'concluded', conclusion: { frame: 'result', outcome: 'cancelled' } });

    // The next process reports the conclusion the operation reached.
    const again = makeClient(hub, { cursorStore: store });
    clients.push(again);
    await again.client.start();
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    const result = await conn2.seen((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id, 'the result');
    expect(result.payload).toMatchObject({ outcome: 'cancelled', message: 'stopped by the operator' });
  });
});
