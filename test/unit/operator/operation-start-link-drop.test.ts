/**
 * An `operation.start` the operator has read is answered, even when the link it came on drops
 * before the start is settled and the next session is fresh (the hub does not send an expired
 * start to a fresh session). Found by review: two paths dropped the start's deadline watch with
 * the link, so the operator went quiet on a request it had received (spec, Correlation: "a
 * responder that cannot meet it must answer with error, not go quiet"):
 *  - a start queued behind a slow handler, whose turn came after the link had dropped, was
 *    skipped, and nothing watched its deadline any more;
 *  - an admission gate that answered `transient` after the link had dropped: the deadline watch
 *    for a deferred start was only set up while the link was still up.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, transient, type HandlerResult } from '../../../src/operator/handlers';
import { newId } from '../../../src/protocol';
import { desiredPayload, openWelcomed, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const c of clients.splice(0)) await c.client.stop({ graceful: false });
  await hub.stop();
});

const open = (options: Parameters<typeof openWelcomed>[2]) => openWelcomed(hub, clients, options);

/** Away past the deadline, then welcomed into a fresh session: the answer must come there. */
async function freshSessionAnswers(client: TestClient, startId: string) {
  client.timers.advance(6_000);
  const conn2 = await hub.nextConnection();
  await conn2.nextOf('hello');
  conn2.welcome({ session_id: 'S-fresh', full_resync: true });
  const err = await eventually(() => conn2.frames.find((f) => f.type === 'error' && f.reply_to === startId), 'the deadline error in the fresh session');
  expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });
  return conn2;
}

describe('a start read on a link that drops before the start is settled', () => {
  it('queued behind a slow handler, its turn after the drop: answered at its deadline in the next, fresh session, and never run', async () => {
    let release!: () => void;
    const slow = new Promise<void>((r) => (release = r));
    const { t: client, conn } = await open({
      desiredResult: async () => {
        await slow;
        return applied();
      },
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => client.calls.desired.length === 1, 'the desired handler running');
    const sent = conn.sendSeq('operation.start', { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(client.timers.now() + 5_000).toISOString() });
    await new Promise((r) => setTimeout(r, 20));
    conn.close(1000);
    await conn.waitClosed();
    // The handler returns before the deadline; the start's turn comes on a link that has ended.
    release();
    await new Promise((r) => setTimeout(r, 20));
    const conn2 = await freshSessionAnswers(client, sent.id);
    expect(client.calls.operations).toHaveLength(0);
    expect(conn2.frames.filter((f) => f.reply_to === sent.id)).toHaveLength(1);
  });

  it('whose admission gate answers transient only after the drop: answered at its deadline in the next, fresh session', async () => {
    let decide!: (r: HandlerResult) => void;
    let asked = 0;
    const { t: client, conn } = await open({
      handlers: {
        admitOperation: () => {
          asked++;
          return new Promise<HandlerResult>((resolve) => (decide = resolve));
        },
        operation: () => ({ outcome: 'succeeded', message: 'never runs' }),
      },
    });
    const sent = conn.sendSeq('operation.start', { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(client.timers.now() + 5_000).toISOString() });
    await eventually(() => asked === 1, 'the gate to be asked');
    conn.close(1000);
    await conn.waitClosed();
    decide(transient('the cluster is busy'));
    await new Promise((r) => setTimeout(r, 20));
    await freshSessionAnswers(client, sent.id);
    expect(asked, 'the gate is not asked again past the deadline').toBe(1);
  });
});
