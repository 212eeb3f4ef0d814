/**
 * The SDK on a node whose wall clock steps (NTP correcting a drift, a VM resumed after suspend).
 * The link's limits are durations: the silence limit (30 s without a frame) and the ack limit
 * (60 s with the hub's ack not moving). They were measured on the wall clock, so a step back by an
 * hour left a half-open link, or frames the hub never acked, unnoticed for an extra hour, and a
 * step forward closed a healthy link at once (found by a review). The stall report of a handler
 * that does not return, and the interval between link.stats reports, were held back the same
 * way. Only operation deadlines, which the hub sends as wall-clock times, belong on the wall clock.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, type HandlerResult } from '../../../src/operator/handlers';
import { ackAll, desiredPayload, makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

const HOUR_MS = 3_600_000;

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

async function open(options: Parameters<typeof makeClient>[1] = {}): Promise<{ t: TestClient; conn: HubConnection }> {
  const t = makeClient(hub, options);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1' });
  await readResync(conn);
  return { t, conn };
}

/** A frame from the hub, and its answer back: everything sent before it has been read. */
async function sync(conn: HubConnection): Promise<void> {
  const before = conn.frames.filter((f) => f.type === 'pong').length;
  conn.send('ping', {});
  await eventually(() => conn.frames.filter((f) => f.type === 'pong').length > before, 'pong');
}

/** Let the SDK act on what the timers just ran (a close goes out asynchronously). */
const settle = () => new Promise((r) => setTimeout(r, 30));

describe('the link limits across a wall-clock step', () => {
  it('a half-open link is closed 4408 after 30 s of silence though the wall clock stepped back an hour', async () => {
    const { t, conn } = await open();
    // Nothing waits for an ack: the silence, not the ack limit, is what closes this link.
    ackAll(conn);
    await sync(conn);
    t.timers.stepWallClock(-HOUR_MS);
    t.timers.advance(30_000);
    expect((await conn.waitClosed()).code).toBe(4408);
  });

  it('a link that heard the hub 10 s ago stays open when the wall clock steps forward an hour', async () => {
    const { t, conn } = await open();
    ackAll(conn);
    t.timers.advance(20_000);
    await sync(conn);
    t.timers.stepWallClock(HOUR_MS);
    // The look the welcome armed falls due 30 s after it: 10 s after the hub's last frame.
    t.timers.advance(10_000);
    await settle();
    expect(conn.closed).toBeNull();
  });

  it('frames the hub never acks close the link (no ack for 60 s) though the wall clock stepped back an hour', async () => {
    // The resync stream went out and nothing acknowledges it; the hub stays audible meanwhile.
    const { t, conn } = await open();
    t.timers.stepWallClock(-HOUR_MS);
    for (let s = 0; s < 50 && !conn.closed; s += 10) {
      t.timers.advance(10_000);
      await sync(conn);
    }
    expect(conn.closed).toBeNull();
    t.timers.advance(10_000);
    expect(await conn.waitClosed()).toMatchObject({ code: 4408, reason: 'no ack for 60 s' });
  });
});

describe('the other durations across a wall-clock step back by an hour', () => {
  it('a handler that does not return is reported stalled at handlerStallMs', async () => {
    const { t, conn } = await open({ handlerStallMs: 1_000, desiredResult: () => new Promise<HandlerResult>(() => {}) });
    const stalls: number[] = [];
    t.client.on('stalled', (s) => stalls.push(s.heldMs));
    conn.sendSeq('deployment.desired', desiredPayload('stuck'));
    await eventually(() => t.calls.desired.length === 1, 'the stuck handler to be called');
    t.timers.stepWallClock(-HOUR_MS);
    t.timers.advance(1_000);
    expect(stalls).toEqual([1_000]);
  });

  it('a handler failure reaches the hub in link.stats within the 5 s interval', async () => {
    let throwsLeft = 1;
    const { t, conn } = await open({
      desiredResult: () => {
        if (throwsLeft-- > 0) throw new Error('api server down');
        return applied();
      },
    });
    t.timers.stepWallClock(-HOUR_MS);
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t.client.stats.handlerFailures === 1, 'the handler failure');
    t.timers.advance(5_000);
    await conn.seen((f) => f.type === 'link.stats' && f.payload.handler_failures === 1, 'link.stats with the failure');
  });
});
