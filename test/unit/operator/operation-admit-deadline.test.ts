/**
 * An `admitOperation` gate that keeps answering `transient` leaves the start unacknowledged and
 * retried with the backoff (500 ms doubling to 30 s). The deadline's `error {code: "deadline"}`
 * is decided at a retry, so it went out at the first retry after the deadline: up to the backoff
 * cap late (here 7.5 s after the start against a 5 s deadline). A deferred start is now retried at
 * its deadline at the latest, and the error goes out then.
 *
 * A gate still deciding at the deadline (a slow API server behind it) was not watched at all: the
 * hub heard nothing until it returned, and a gate that then let the start through had it accepted
 * and run, its result sent after the deadline (found by review; the test fails on the code before).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, transient, type HandlerResult } from '../../../src/operator/handlers';
import { newId } from '../../../src/protocol';
import { makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
let t: TestClient | null = null;

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  await t?.client.stop({ graceful: false });
  t = null;
  await hub.stop();
});

/** A client whose admission gate defers every start, in session `sessionId`, sent one start with a 5 s deadline. */
async function deferredStart(sessionId: string) {
  const gateCalls = { n: 0 };
  const client = makeClient(hub, {
    handlers: {
      admitOperation: () => {
        gateCalls.n++;
        return transient('the cluster is busy');
      },
      operation: () => ({ outcome: 'succeeded', message: 'never runs' }),
    },
  });
  t = client;
  await client.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: sessionId });
  await readResync(conn);
  const start = client.timers.now();
  const sent = conn.sendSeq('operation.start', { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(start + 5_000).toISOString() });
  return { client, conn, gateCalls, start, sent };
}

describe('an operation whose admission keeps being deferred', () => {
  it('is answered with the deadline error at its deadline, not at the next backoff retry', async () => {
    const { client, conn, gateCalls, start, sent } = await deferredStart('S-admit');
    await eventually(() => gateCalls.n === 1, 'the gate to be asked');
    const deadlineError = () => conn.frames.find((f) => f.type === 'error' && f.reply_to === sent.id);

    // Retries at 0.5, 1.5 and 3.5 s: still before the deadline, still deferred.
    for (const at of [500, 1_500, 3_500]) {
      client.timers.advance(at - (client.timers.now() - start));
      await eventually(() => gateCalls.n >= 2 + [500, 1_500, 3_500].indexOf(at), `the retry at ${at} ms`);
    }
    client.timers.advance(5_000 - (client.timers.now() - start) - 1);
    await new Promise((r) => setTimeout(r, 20));
    expect(deadlineError(), 'nothing before the deadline').toBeUndefined();

    client.timers.advance(1);
    const err = await eventually(deadlineError, 'the deadline error at the deadline');
    expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });
    expect(gateCalls.n, 'the gate is not asked once the deadline has passed').toBe(4);
  });

  it('a deferred start whose link drops before its deadline is answered at the deadline, in the next session, though it is fresh and the hub does not send the start again', async () => {
    // Found by review: the retry died with the link and nothing else watched the deadline, so the
    // operator never answered a request it had received (spec, Correlation: "must answer with
    // error, not go quiet"). The hub does not redeliver an expired operation to a fresh session.
    const { client, conn, gateCalls, sent } = await deferredStart('S-drop');
    await eventually(() => gateCalls.n === 1, 'the gate to be asked');
    conn.close(1000);
    await conn.waitClosed();

    // Away past the deadline: the reconnect (its backoff on this clock) and the deadline both fall in it.
    client.timers.advance(6_000);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S-fresh', full_resync: true });
    const err = await eventually(() => conn2.frames.find((f) => f.type === 'error' && f.reply_to === sent.id), 'the deadline error in the next session');
    expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });
    expect(gateCalls.n, 'the gate is not asked again').toBe(1);
  });

  it('a gate still deciding at the deadline: the start is answered then, and not run once the gate lets it through', async () => {
    let decide!: (r: HandlerResult) => void;
    let ran = 0;
    t = makeClient(hub, {
      handlers: {
        admitOperation: () => new Promise<HandlerResult>((resolve) => (decide = resolve)),
        operation: () => {
          ran++;
          return { outcome: 'succeeded', message: 'ran past its deadline' };
        },
      },
    });
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-admit' });
    await readResync(conn);

    const operationId = newId();
    const sent = conn.sendSeq('operation.start', { operation_id: operationId, kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(t.timers.now() + 5_000).toISOString() });
    await eventually(() => decide !== undefined, 'the gate to be asked');
    t.timers.advance(5_000);
    const err = await conn.seen((f) => f.type === 'error' && f.reply_to === sent.id, 'the deadline error at the deadline');
    expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });

    // The gate lets it through after all: too late to run, and already answered.
    decide(applied());
    await eventually(() => t!.client.session.cursor === 1, 'the start settled');
    // A frame after it is answered after anything the start still queued.
    const probe = conn.sendSeq('operation.start', { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(t.timers.now() - 1).toISOString() });
    await conn.seen((f) => f.type === 'error' && f.reply_to === probe.id, 'the answer to the next start');
    expect(ran).toBe(0);
    expect(conn.frames.filter((f) => f.type === 'operation.accepted')).toHaveLength(0);
    expect(conn.frames.filter((f) => f.reply_to === sent.id)).toHaveLength(1);
  });
});
