/**
 * An operation that concludes while the link is down (the hub unreachable, the client in its
 * backoff) is saved as concluded at once. The writer saves the record only while a link is open,
 * so the conclusion waited for the next dial, up to the backoff's cap: a crash meanwhile left the
 * record saying "running", and the next process reported the finished operation as interrupted
 * (failed). Found by review; the test fails on the code before.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { makeClient, readResync, type TestClient } from './support/harness';
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

it('an operation concluded during the backoff is saved as concluded before the next dial, and a crash then reports its real outcome', async () => {
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
  const onDisk = await t.store.load();

  // A crash now: the next process starts from what is saved.
  const copy = new MemoryCursorStore();
  await copy.save(onDisk!);
  const next = makeClient(hub, { cursorStore: copy });
  clients.push(next);
  await next.client.start();
  const conn2 = await hub.nextConnection();
  await conn2.nextOf('hello');
  conn2.welcome({ session_id: 'S2', full_resync: true });
  await readResync(conn2);
  const result = await conn2.seen((f) => f.type === 'operation.result', 'the conclusion re-sent');
  expect(result.payload).toMatchObject({ operation_id: start.operation_id, outcome: 'succeeded' });
});
