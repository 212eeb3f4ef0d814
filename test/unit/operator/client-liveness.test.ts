import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

async function open(options: Parameters<typeof makeClient>[1] = {}, limits: { ping_interval_s?: number; idle_timeout_s?: number } = {}) {
  const t = makeClient(hub, options);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1', limits });
  await readResync(conn);
  return { t, conn };
}

async function sync(conn: HubConnection): Promise<void> {
  const before = conn.frames.filter((f) => f.type === 'pong').length;
  conn.send('ping', {});
  await eventually(() => conn.frames.filter((f) => f.type === 'pong').length > before, 'pong');
}

const pings = (conn: HubConnection) => conn.frames.filter((f) => f.type === 'ping');

describe('liveness', () => {
  it('pings every 10 s, carrying the cursor', async () => {
    const { t, conn } = await open();
    t.timers.advance(9_999);
    await sync(conn);
    expect(pings(conn)).toHaveLength(0);
    t.timers.advance(1);
    await eventually(() => pings(conn).length === 1, 'first ping');
    t.timers.advance(10_000);
    await eventually(() => pings(conn).length === 2, 'second ping');
    expect(pings(conn).every((p) => p.seq === null && p.ack === 0)).toBe(true);
  });

  it("follows the hub's advertised ping interval unless configured", async () => {
    const { t, conn } = await open({}, { ping_interval_s: 3 });
    t.timers.advance(3_000);
    await eventually(() => pings(conn).length === 1, 'ping at the advertised interval');

    const configured = await open({ pingIntervalMs: 1_000 }, { ping_interval_s: 3 });
    configured.t.timers.advance(1_000);
    await eventually(() => pings(configured.conn).length === 1, 'ping at the configured interval');
  });

  it('closes a link that has been silent for 30 s (4408), then reconnects', async () => {
    const { t, conn } = await open();
    t.timers.advance(20_000);
    conn.send('pong', {});
    await sync(conn); // A frame of any kind resets the silence.
    t.timers.advance(20_000);
    await sync(conn);
    expect(conn.closed).toBeNull();
    t.timers.advance(30_000);
    expect((await conn.waitClosed()).code).toBe(4408);
    await eventually(() => t.client.state === 'waiting', 'backoff');
    t.timers.advance(t.client.session.nextReconnectInMs ?? 0);
    await hub.nextConnection();
  });

  it('a handshake that never gets a welcome is also cut at the idle limit', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    t.timers.advance(30_000);
    expect((await conn.waitClosed()).code).toBe(4408);
  });
});

describe('reconnect backoff', () => {
  it('is exponential from 1 s to 30 s with full jitter, forever', async () => {
    const draws = [0.999999, 0.999999, 0.999999, 0.999999, 0.999999, 0.999999, 0.999999, 0.5, 0];
    let i = 0;
    const t = makeClient(hub, { random: () => draws[i++ % draws.length]! });
    clients.push(t);
    hub.refuseWith = 503;
    await t.client.start();
    const delays: number[] = [];
    for (let attempt = 0; attempt < 9; attempt++) {
      await eventually(() => t.client.state === 'waiting' && hub.attempts === attempt + 1, `attempt ${attempt + 1} refused`);
      const d = t.client.session.nextReconnectInMs!;
      delays.push(d);
      t.timers.advance(d);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 15_000, 0]);
  });

  it('waits the full cap after a refusal and reports it', async () => {
    const t = makeClient(hub, { random: () => 0.999999 });
    clients.push(t);
    const refusals: unknown[] = [];
    t.client.on('refused', (r) => refusals.push(r));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.send('error', { code: 'invalid', message: 'cluster disabled', retryable: false }, { seq: 1 });
    conn.close(4403, 'refused');
    await eventually(() => t.client.state === 'waiting', 'backoff');
    expect(t.client.session.nextReconnectInMs).toBe(30_000);
    expect(refusals).toEqual([{ code: 4403, reason: 'refused', httpStatus: null, error: { code: 'invalid', message: 'cluster disabled', retryable: false } }]);
  });

  it('treats an HTTP 401 at the upgrade as a refusal', async () => {
    hub.refuseWith = 401;
    const t = makeClient(hub, { random: () => 0.999999 });
    clients.push(t);
    await t.client.start();
    await eventually(() => t.client.state === 'waiting', 'backoff');
    expect(t.client.session.nextReconnectInMs).toBe(30_000);
  });

  it('resets after a session that stayed up', async () => {
    const t = makeClient(hub, { random: () => 0.999999 });
    clients.push(t);
    hub.refuseWith = 503;
    await t.client.start();
    for (let n = 1; n <= 3; n++) {
      await eventually(() => t.client.state === 'waiting' && hub.attempts === n, `attempt ${n}`);
      t.timers.advance(t.client.session.nextReconnectInMs!);
    }
    hub.refuseWith = null;
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    conn.send('pong', {});
    t.timers.advance(9_000);
    conn.send('pong', {});
    await eventually(() => t.client.session.nextReconnectInMs === null && t.client.state === 'open', 'open');
    t.timers.advance(1_000);
    conn.terminate();
    await eventually(() => t.client.state === 'waiting', 'backoff');
    expect(t.client.session.nextReconnectInMs).toBe(1_000);
  });
});
