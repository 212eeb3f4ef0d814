import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildFrame, canonicalPing, canonicalPong } from '../../../src/protocol';
import { ackAll, cursorReaches, desiredPayload, makeClient, readResync, type TestClient } from './support/harness';
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
    // Nothing waits for an ack: the silence, not the ack limit, is what closes this link.
    ackAll(conn);
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

  it('a handshake that gets no welcome within 10 s of the hello is closed (4408) and backed off, well before the idle limit', async () => {
    const t = makeClient(hub, { random: () => 0.5 });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    t.timers.advance(9_999);
    await new Promise((r) => setTimeout(r, 20));
    expect(conn.closed).toBeNull();
    t.timers.advance(1);
    expect((await conn.waitClosed()).code).toBe(4408);
    await eventually(() => t.client.state === 'waiting', 'backoff');
    expect(t.client.session.nextReconnectInMs).toBe(500);
  });

  it('the handshake timeout is configuration (handshakeTimeoutMs)', async () => {
    const t = makeClient(hub, { handshakeTimeoutMs: 2_500 });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    t.timers.advance(2_500);
    expect((await conn.waitClosed()).code).toBe(4408);
  });
});

describe('the ack limit: frames the hub never acknowledges', () => {
  /** Keep the link alive as the hub's runtime would (a pong now and then), acking nothing. */
  async function alive(t: TestClient, conn: HubConnection, ms: number, stepMs = 10_000): Promise<void> {
    for (let left = ms; left > 0; left -= stepMs) {
      t.timers.advance(Math.min(stepMs, left));
      if (conn.closed) return;
      await sync(conn);
    }
  }

  it('with the ack not moving for twice the idle limit, the link is closed (4408) and the resume replays them', async () => {
    // The resync stream went out and nothing acknowledges it: as if a proxy had dropped it.
    const { t, conn } = await open();
    const sent = conn.frames.filter((f) => f.seq !== null).map((f) => f.raw);
    expect(sent.length).toBeGreaterThan(0);
    await alive(t, conn, 59_000);
    expect(conn.closed).toBeNull();
    t.timers.advance(1_000);
    expect(await conn.waitClosed()).toMatchObject({ code: 4408, reason: 'no ack for 60 s' });
    expect(t.logger.records.some((r) => r.msg.startsWith('the hub has not acknowledged sent frames'))).toBe(true);

    await eventually(() => t.client.state === 'waiting', 'backoff');
    t.timers.advance(t.client.session.nextReconnectInMs ?? 0);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0 });
    // The same frames again, verbatim, on the new link.
    await eventually(() => conn2.frames.filter((f) => f.seq !== null).length >= sent.length, 'replay');
    expect(conn2.frames.filter((f) => f.seq !== null).map((f) => f.raw).slice(0, sent.length)).toEqual(sent);
  });

  it('follows the advertised idle limit, or ackTimeoutMs when configured', async () => {
    // Within the bounds the SDK keeps a welcome to (idle ≥ twice the ping interval; handshake.ts).
    const advertised = await open({}, { ping_interval_s: 2, idle_timeout_s: 5 });
    await alive(advertised.t, advertised.conn, 9_000, 1_000);
    expect(advertised.conn.closed).toBeNull();
    advertised.t.timers.advance(1_000);
    expect((await advertised.conn.waitClosed()).code).toBe(4408);

    const configured = await open({ ackTimeoutMs: 15_000 });
    await alive(configured.t, configured.conn, 14_000);
    expect(configured.conn.closed).toBeNull();
    configured.t.timers.advance(1_000);
    expect(await configured.conn.waitClosed()).toMatchObject({ code: 4408, reason: 'no ack for 15 s' });
  });

  it('an ack that moves restarts the wait, though frames stay unacknowledged throughout', async () => {
    const { t, conn } = await open();
    const seqs = conn.frames.filter((f) => f.seq !== null).map((f) => f.seq as number);
    expect(seqs.length).toBeGreaterThan(1);
    await alive(t, conn, 50_000);
    // Acknowledge all but the last: the ack moved, something still waits.
    conn.send('ack', {}, { ack: Math.max(...seqs) - 1 });
    await sync(conn);
    await alive(t, conn, 59_000);
    expect(conn.closed).toBeNull();
    t.timers.advance(1_000);
    expect((await conn.waitClosed()).code).toBe(4408);
  });

  it('with everything acknowledged nothing waits, however long the link stays up', async () => {
    const { t, conn } = await open();
    ackAll(conn);
    await sync(conn);
    await alive(t, conn, 300_000);
    expect(conn.closed).toBeNull();
  });
});

describe('canonical ping and pong', () => {
  it('every ping is the canonical text carrying the durable cursor: byte-identical while the cursor does not move', async () => {
    const { t, conn } = await open();
    t.timers.advance(10_000);
    t.timers.advance(10_000);
    await eventually(() => pings(conn).length === 2, 'two pings');
    expect(pings(conn).map((p) => p.raw)).toEqual([canonicalPing(0), canonicalPing(0)]);
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(t, 1);
    t.timers.advance(50); // the ack delay: the cursor is saved before the ack goes out
    await eventually(() => t.client.session.durableCursor === 1, 'the cursor saved');
    t.timers.advance(10_000);
    await eventually(() => pings(conn).length === 3, 'third ping');
    expect(pings(conn)[2]?.raw).toBe(canonicalPing(1));
  });

  it("answers the hub's canonical ping with the canonical pong", async () => {
    const { conn } = await open();
    conn.ping(0);
    const pong = await conn.seen((f) => f.type === 'pong', 'pong');
    expect(pong.raw).toBe(canonicalPong(0));
  });

  it('reads a pong of either form: the canonical one and the one with an id, a ts and a reply_to', async () => {
    const { t, conn } = await open();
    const sent = conn.frames.filter((f) => f.seq !== null).length;
    conn.send('pong', {}, { ack: 1 });
    await eventually(() => t.client.session.outbound?.peerAck === 1, 'the canonical pong to release seq 1');
    conn.sendRaw(buildFrame({ type: 'pong', payload: {}, ack: sent, reply_to: conn.frames[0]!.id }));
    await eventually(() => t.client.session.outbound?.peerAck === sent, 'the old-form pong to release the rest');
    expect(t.client.state).toBe('open');
    expect(t.logger.records.filter((r) => r.level === 'warn' || r.level === 'error')).toEqual([]);
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

  it('after a refusal draws under the whole cap, never past it, and reports it', async () => {
    const t = makeClient(hub, { random: () => 0.999999 });
    clients.push(t);
    const refusals: unknown[] = [];
    t.client.on('refused', (r) => refusals.push(r));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.refuse({ code: 'conflict', message: 'cluster is disabled', retryable: false }, 4403);
    await eventually(() => t.client.state === 'waiting', 'backoff');
    // The largest draw: the cap itself, never more (the spec's 30 s), whatever the attempt count.
    expect(t.client.session.nextReconnectInMs).toBe(30_000);
    expect(refusals).toEqual([
      {
        kind: 'refused',
        closeCode: 4403,
        code: 4403,
        reason: 'cluster is disabled',
        httpStatus: null,
        error: { code: 'conflict', message: 'cluster is disabled', retryable: false },
        retryInMs: 30_000,
      },
    ]);
  });

  it('treats an HTTP 401 at the upgrade as a refusal', async () => {
    hub.refuseWith = 401;
    const t = makeClient(hub, { random: () => 0.5 });
    clients.push(t);
    await t.client.start();
    await eventually(() => t.client.state === 'waiting', 'backoff');
    // Drawn under the whole cap, not under the first attempt's 1 s ceiling.
    expect(t.client.session.nextReconnectInMs).toBe(15_000);
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

describe('the silence limit the welcome sets', () => {
  it('a half-open link after a welcome lowering idle_timeout_s to 3 s is closed 4408 by then, not after the 30 s the first link was watched by', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', limits: { ping_interval_s: 1, idle_timeout_s: 3 } });
    await readResync(conn);
    ackAll(conn);
    await new Promise((r) => setTimeout(r, 30));
    // The hub goes silent (no close frame, no pong): step a second at a time.
    let closedAfterS: number | null = null;
    for (let i = 1; i <= 40 && closedAfterS === null; i++) {
      t.timers.advance(1_000);
      await new Promise((r) => setTimeout(r, 30));
      if (conn.closed || t.client.state === 'waiting') closedAfterS = i;
    }
    expect(conn.closed?.code).toBe(4408);
    expect(closedAfterS).toBeLessThanOrEqual(4);
  });

  it('the next handshake still gets its 10 s: a hub that takes 5 s to answer the hello is not cut at the 3 s the previous welcome set for an open link', async () => {
    // The hub closes a handshake only at its HANDSHAKE_TIMEOUT_MS (10 s) and applies its silence
    // rule to the session's open connection; an operator that applied the open link's 3 s during
    // the handshake would never get past a hello that costs the hub more than 3 s (a slow claim).
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const first = await hub.nextConnection();
    await first.nextOf('hello');
    first.welcome({ session_id: 'S1', limits: { ping_interval_s: 1, idle_timeout_s: 3 } });
    await readResync(first);
    const acked = ackAll(first);
    first.close(1013, 'try again later');
    await eventually(() => t.client.state === 'waiting', 'backoff');
    t.timers.advance(t.client.session.nextReconnectInMs ?? 0);
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    for (let i = 1; i <= 5; i++) {
      t.timers.advance(1_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(conn.closed).toBeNull();
    expect(t.client.state).toBe('handshaking');
    conn.welcome({ session_id: 'S1', ack_seq: acked, full_resync: false, limits: { ping_interval_s: 1, idle_timeout_s: 3 } });
    await eventually(() => t.client.state === 'open', 'the session to open on the second link');
    // Once open, the welcome's 3 s silence rule applies again.
    t.timers.advance(3_000);
    expect((await conn.waitClosed()).code).toBe(4408);
  });
});
