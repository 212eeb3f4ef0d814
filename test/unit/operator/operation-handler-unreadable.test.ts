/**
 * An operation handler's failure is the application's, whatever value it fails with: the
 * operation is concluded `failed` and the hub told so. An operation whose handler rejected with a
 * value that has no string form (a null-prototype object), an Error whose `message` getter
 * throws, or which returned a conclusion whose getter throws, was never concluded: describing the
 * value threw inside the promise chain that concludes it, the chain rejected with nobody to catch
 * it (an unhandled rejection: Node's default ends the process), and the deadline timer was
 * cancelled on the way out, so the hub heard nothing until the next process reported it `failed`
 * (found by review; fails on the code before).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OperationConclusion } from '../../../src/operator/handlers';
import { makeClient, type TestClient } from './support/harness';
import { openSession, operationStart } from './support/operations';
import { ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);

beforeEach(async () => {
  hub = await ScriptedHub.start();
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(async () => {
  process.off('unhandledRejection', onUnhandled);
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const throwingGetter = (name: string) => (): never => {
  throw new Error(`${name} is not readable`);
};

const cases: [string, () => Promise<OperationConclusion>][] = [
  ['rejects with a null-prototype object', () => Promise.reject(Object.create(null) as object)],
  ['rejects with an Error whose message getter throws', () => Promise.reject(Object.defineProperty(new Error(), 'message', { get: throwingGetter('message') }))],
  ['returns a conclusion whose outcome getter throws', async () => Object.defineProperty({}, 'outcome', { get: throwingGetter('outcome') }) as OperationConclusion],
];

describe('an operation handler that fails with a value the SDK cannot describe', () => {
  it.each(cases)('one that %s is concluded failed, with no unhandled rejection', async (_name, operation) => {
    const t = makeClient(hub, { handlers: { operation } });
    clients.push(t);
    const conn = await openSession(hub, t, 'S1');
    const start = operationStart(t.timers.now());
    conn.sendSeq('operation.start', start);
    const result = await conn.seen((f) => f.type === 'operation.result' && f.payload.operation_id === start.operation_id, 'the operation concluded');
    expect(result.payload).toMatchObject({ outcome: 'failed' });
    expect(unhandled).toEqual([]);
  });
});
