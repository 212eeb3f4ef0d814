/**
 * Refusals and displacement (issue 11 items 1 and 3): every refusal reaches the application as
 * one typed `refused` event and one error log line; a refusal the hub will not reverse by itself
 * waits the whole backoff cap; a displaced operator comes back as a new session, never resuming
 * the one it was displaced from. The scripted hub refuses as the real one does: the
 * connection-level error (fixtures/forms/error.connection.json), then the close.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import type { RefusedEvent } from '../../../src/operator/client';
import { cursorReaches, desiredPayload, makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
const track = (t: TestClient) => (clients.push(t), t);

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

function watch(t: TestClient) {
  const refused: RefusedEvent[] = [];
  t.client.on('refused', (r) => refused.push(r));
  return refused;
}

const errorLines = (t: TestClient) => t.logger.records.filter((r) => r.level === 'error');

async function handshake(t: TestClient): Promise<HubConnection> {
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  return conn;
}

async function waiting(t: TestClient): Promise<number> {
  await eventually(() => t.client.state === 'waiting', 'the backoff');
  return t.client.session.nextReconnectInMs as number;
}

const DISABLED = { code: 'conflict' as const, message: 'cluster is disabled', retryable: false };
const VERSION = { code: 'invalid' as const, message: 'operator version 9.0.0 is another major than the plane (0.1.0)', retryable: false };

describe('refusals reach the application', () => {
  it('a handshake refusal (connection-level error, then 4403) is one typed event and one error line, and the next attempt waits the whole cap', async () => {
    // The largest draw: the whole cap (30 s), never more.
    const t = track(makeClient(hub, { random: () => 0.999999 }));
    const refused = watch(t);
    await t.client.start();
    const conn = await handshake(t);
    conn.refuse(DISABLED, 4403);
    expect(await waiting(t)).toBe(30_000);
    expect(refused).toEqual([
      { kind: 'refused', closeCode: 4403, code: 4403, httpStatus: null, error: DISABLED, reason: 'cluster is disabled', retryInMs: 30_000 },
    ]);
    const lines = errorLines(t);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ msg: 'the hub refused this operator', kind: 'refused', close_code: 4403, error_code: 'conflict', retryable: false, retry_in_ms: 30_000 });
  });

  it('a version refusal (error retryable false, then 4400 before welcome) waits the cap every time, and the operator keeps trying', async () => {
    const t = track(makeClient(hub, { random: () => 0.999999, operatorVersion: '9.0.0' }));
    const refused = watch(t);
    await t.client.start();
    for (let attempt = 1; attempt <= 4; attempt++) {
      const conn = await handshake(t);
      conn.refuse(VERSION, 4400);
      expect(await waiting(t)).toBe(30_000);
      expect(refused).toHaveLength(attempt);
      expect(refused[attempt - 1]).toMatchObject({ kind: 'handshake', closeCode: 4400, error: VERSION });
      t.timers.advance(29_999);
      await new Promise((r) => setTimeout(r, 10));
      expect(hub.connections).toHaveLength(attempt);
      t.timers.advance(1);
    }
    await hub.nextConnection();
    expect(errorLines(t)).toHaveLength(4);
  });

  it('a refusal the hub calls retryable (registry unavailable, 1013) is reported and keeps the ordinary backoff', async () => {
    const t = track(makeClient(hub, { random: () => 0.5 }));
    const refused = watch(t);
    await t.client.start();
    const conn = await handshake(t);
    const unavailable = { code: 'unavailable' as const, message: 'registry unavailable; retry', retryable: true };
    conn.refuse(unavailable, 1013);
    expect(await waiting(t)).toBe(500);
    expect(refused).toEqual([expect.objectContaining({ kind: 'handshake', closeCode: 1013, error: unavailable, retryInMs: 500 })]);
    // The operator comes back by itself: a warning, not an error that pages someone.
    expect(errorLines(t)).toEqual([]);
    expect(t.logger.records.filter((r) => r.level === 'warn' && r.msg === 'the hub turned this connection away for now; retrying')).toEqual([
      expect.objectContaining({ close_code: 1013, error_code: 'unavailable', retryable: true, retry_in_ms: 500 }),
    ]);
  });

  it('an HTTP 401 at the upgrade is a refusal: the event carries the status, and the next attempt waits the cap', async () => {
    hub.refuseWith = 401;
    const t = track(makeClient(hub, { random: () => 0.999999 }));
    const refused = watch(t);
    await t.client.start();
    expect(await waiting(t)).toBe(30_000);
    expect(refused).toEqual([expect.objectContaining({ kind: 'unauthorized', httpStatus: 401, retryInMs: 30_000 })]);
    expect(errorLines(t)).toHaveLength(1);
  });

  it('an upgrade answered by something that is not the hub (a 404 of a wrong url, a redirect) is a refusal a person sees: the event, one error line, and the next attempt under the cap', async () => {
    // Was an info "link closed" and the ordinary backoff, for ever: nothing told anyone the url was wrong.
    for (const status of [404, 301]) {
      hub.refuseWith = status;
      const t = track(makeClient(hub, { random: () => 0.999999 }));
      const refused = watch(t);
      await t.client.start();
      expect(await waiting(t)).toBe(30_000);
      expect(refused).toEqual([expect.objectContaining({ kind: 'handshake', httpStatus: status, error: expect.objectContaining({ retryable: false, message: expect.stringContaining(`HTTP ${status}`) }) })]);
      expect(errorLines(t)).toHaveLength(1);
      await t.client.stop();
    }
  });

  it('an HTTP 503 at the upgrade (registry unavailable, JSON body, Retry-After: 5) is retried after Retry-After plus the backoff draw, with a warning', async () => {
    // It used to be a non-retryable handshake refusal: an error line and a wait drawn under the
    // whole cap, as if the operator were refused for good.
    hub.refuseWith = 503;
    hub.refuseBody = JSON.stringify({ error: { code: 'unavailable', message: 'the cluster registry is unavailable; retry with backoff' } });
    hub.refuseHeaders = { 'Retry-After': '5' };
    const t = track(makeClient(hub, { random: () => 0.5 }));
    const refused = watch(t);
    await t.client.start();
    // Not sooner than the hub asked (5 s), plus the ordinary first draw (500 ms).
    expect(await waiting(t)).toBe(5_500);
    expect(refused).toEqual([expect.objectContaining({ kind: 'handshake', httpStatus: 503, error: expect.objectContaining({ code: 'unavailable', retryable: true }), retryInMs: 5_500 })]);
    expect(errorLines(t)).toEqual([]);
    expect(t.logger.records.filter((r) => r.level === 'warn' && r.msg === 'the hub turned this connection away for now; retrying')).toEqual([
      expect.objectContaining({ http_status: 503, error_code: 'unavailable', retryable: true, retry_in_ms: 5_500 }),
    ]);
  });

  it('a Retry-After past the backoff cap waits the cap; a 429 or a 5xx without a JSON body is retried too, never an error line', async () => {
    hub.refuseWith = 429;
    hub.refuseHeaders = { 'Retry-After': '600' };
    const t = track(makeClient(hub, { random: () => 0.5 }));
    await t.client.start();
    expect(await waiting(t)).toBe(30_000);
    expect(errorLines(t)).toEqual([]);
    expect(t.logger.records.find((r) => r.msg === 'link closed')).toMatchObject({ level: 'info', http_status: 429 });
  });

  it("a live session refused by the hub's ownership poll (error, then 4403) reports the refusal with the hub's error", async () => {
    const t = track(makeClient(hub, { random: () => 0.999999 }));
    const refused = watch(t);
    await t.client.start();
    const conn = await handshake(t);
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    const rotated = { code: 'not_found' as const, message: 'enrollment token was rotated', retryable: false };
    conn.refuse(rotated, 4403, 0);
    expect(await waiting(t)).toBe(30_000);
    expect(refused).toEqual([expect.objectContaining({ kind: 'refused', closeCode: 4403, error: rotated })]);
    // Not displaced: the session is still the one to resume once the cluster is allowed back.
    t.timers.advance(30_000);
    const again = await handshake(t);
    expect(again.frames[0]?.payload).toMatchObject({ session_id: 'S1' });
  });

  it('an error before the close of an open session for a protocol error is no refusal: it reaches hubError and the closed event, and the backoff is the ordinary one', async () => {
    const t = track(makeClient(hub, { random: () => 0.5 }));
    const refused = watch(t);
    const hubErrors: unknown[] = [];
    const closed: unknown[] = [];
    t.client.on('hubError', (e) => hubErrors.push(e));
    t.client.on('closed', (c) => closed.push(c));
    await t.client.start();
    const conn = await handshake(t);
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    const gap = { code: 'invalid' as const, message: 'gap: expected seq 3, got 5', retryable: false };
    conn.refuse(gap, 4400, 0);
    expect(await waiting(t)).toBe(500);
    expect(refused).toEqual([]);
    expect(hubErrors).toEqual([{ payload: gap, replyTo: conn.helloId, seq: null }]);
    expect(closed).toEqual([expect.objectContaining({ code: 4400, welcomed: true, error: gap })]);
  });

  it('a listener that throws does not stop the operator from coming back', async () => {
    const t = track(makeClient(hub, { random: () => 0.999999 }));
    t.client.on('refused', () => {
      throw new Error('application bug');
    });
    await t.client.start();
    (await handshake(t)).refuse(DISABLED, 4403);
    expect(await waiting(t)).toBe(30_000);
    t.timers.advance(30_000);
    await handshake(t);
  });
});

describe('displacement (4409)', () => {
  async function displaced(t: TestClient) {
    const refused = watch(t);
    await t.client.start();
    const conn = await handshake(t);
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(t, 1);
    t.timers.advance(50);
    await eventually(() => t.client.session.durableCursor === 1, 'the cursor saved');
    conn.refuse({ code: 'conflict', message: 'displaced by a newer session for this cluster', retryable: false }, 4409, 0);
    return { refused, delay: await waiting(t) };
  }

  it('logs once that another operator holds the cluster, waits the cap, and comes back asking for no session', async () => {
    const store = new MemoryCursorStore();
    const t = track(makeClient(hub, { random: () => 0.999999, cursorStore: store }));
    const { refused, delay } = await displaced(t);
    expect(delay).toBe(30_000);
    expect(refused).toEqual([expect.objectContaining({ kind: 'displaced', closeCode: 4409, retryInMs: 30_000 })]);
    const lines = errorLines(t);
    expect(lines).toHaveLength(1);
    expect(lines[0]?.msg).toMatch(/another operator holds this cluster/);
    // Saved at once, not at the next dial: a process dying during the wait must not resume it.
    await eventually(() => store.peek()?.sessionId === null, 'the record saved without the session');
    expect(store.peek()).toMatchObject({ sessionId: null, displacedSession: 'S1' });

    t.timers.advance(30_000);
    const conn = await hub.nextConnection();
    const hello = await conn.nextOf('hello');
    expect(hello.payload).toEqual({ cluster_id: 'c1', operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    expect(conn.headers['wingsmith-session']).toBeUndefined();
    // The old record is kept for diagnostics, never as a resume base.
    expect(store.peek()).toMatchObject({ sessionId: null, displacedSession: 'S1' });

    conn.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn);
    expect(t.client.session.sessionId).toBe('S2');
  });

  it('a process restarted after the displacement does not resume the displaced session either', async () => {
    const store = new MemoryCursorStore();
    const first = track(makeClient(hub, { random: () => 0.999999, cursorStore: store }));
    await displaced(first);
    await first.client.stop({ graceful: false });
    const second = track(makeClient(hub, { cursorStore: store }));
    await second.client.start();
    const conn = await hub.nextConnection();
    const hello = await conn.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: null, resume_from: null, lossy: false });
    expect(conn.headers['wingsmith-session']).toBeUndefined();
  });

  it('a refusal received while a graceful stop drains reaches the application like any other (one event, one error line), with no next attempt; the stop still resolves', async () => {
    const t = track(makeClient(hub));
    const refused = watch(t);
    await t.client.start();
    const conn = await handshake(t);
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    // Something the hub has not acknowledged yet, so the graceful stop waits for it.
    t.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await conn.seen((f) => f.type === 'node.observed' && f.reply_to === null, 'the report written');

    const stopped = t.client.stop({ graceful: true });
    await eventually(() => t.client.state === 'stopping', 'the stop draining');
    // The cluster was disabled meanwhile: a person must hear of it, whichever process comes next.
    conn.refuse(DISABLED, 4403, 0);
    await stopped;

    expect({ state: t.client.state, refused, connections: hub.connections.length }).toEqual({
      state: 'stopped',
      refused: [{ kind: 'refused', closeCode: 4403, code: 4403, httpStatus: null, error: DISABLED, reason: 'cluster is disabled', retryInMs: null }],
      connections: 1,
    });
    expect(errorLines(t).filter((l) => l.msg === 'the hub refused this operator')).toEqual([
      expect.objectContaining({ kind: 'refused', close_code: 4403, message: 'cluster is disabled', retry_in_ms: null, stopping: true }),
    ]);
  });

  it('a 4409 received while a graceful stop drains is recorded too: the process restarted after it does not resume the displaced session', async () => {
    const store = new MemoryCursorStore();
    const first = track(makeClient(hub, { cursorStore: store }));
    await first.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(first, 1);
    first.timers.advance(50);
    await eventually(() => first.client.session.durableCursor === 1, 'the cursor saved');
    // Something the hub has not acknowledged yet, so the graceful stop waits for it.
    first.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await conn.seen((f) => f.type === 'node.observed' && f.reply_to === null, 'the report written');

    const stopped = first.client.stop({ graceful: true });
    await eventually(() => first.client.state === 'stopping', 'the stop draining');
    // Meanwhile another operator claimed the cluster: as the real hub does, error then 4409.
    conn.refuse({ code: 'conflict', message: 'displaced by a newer session for this cluster', retryable: false }, 4409, 0);
    await stopped;

    const second = track(makeClient(hub, { cursorStore: store }));
    await second.client.start();
    const next = await hub.nextConnection();
    const hello = await next.nextOf('hello');
    expect({ record: { sessionId: store.peek()?.sessionId, displacedSession: store.peek()?.displacedSession }, hello: hello.payload }).toMatchObject({
      record: { displacedSession: 'S1' },
      hello: { session_id: null, resume_from: null, lossy: false },
    });
    expect(next.headers['wingsmith-session']).toBeUndefined();
  });
});
