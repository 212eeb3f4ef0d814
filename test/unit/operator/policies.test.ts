/**
 * The client's pure policies, without a socket: the handshake (dial headers, hello, fresh or
 * resume), frame triage, the refusal classification, the writer's admission of one frame, the
 * silence rule, the retry delay, and when a stop is drained and clean.
 */
import { describe, expect, it } from 'vitest';
import { isCleanStop, isDrained, type DrainView } from '../../../src/operator/drain';
import { decideWelcome, dialHeaders, helloFor } from '../../../src/operator/handshake';
import { triage } from '../../../src/operator/frame-triage';
import { silence } from '../../../src/operator/link';
import { retryDelay } from '../../../src/operator/receiver';
import { afterRetryAfter, classifyClose, httpRefusalError, refusalLogLine, retryAfterMs, type ClosedLink } from '../../../src/operator/refusal';
import { MemoryOutboundLog } from '../../../src/operator/outbound-log';
import { emptyRecord } from '../../../src/operator/cursor-store';
import { silentLogger } from '../../../src/operator/logger';
import { SessionState } from '../../../src/operator/session';
import { connectUrl } from '../../../src/operator/transport';
import { admit, windowOpen } from '../../../src/operator/writer';
import { buildFrame, canonicalPing, canonicalPong, readFrame } from '../../../src/protocol';
import { fixture, frameFrom } from '../../support/fixtures';

const limits = { ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: 1000, replay_buffer_frames: 3, replay_buffer_bytes: 2500 };

describe('handshake', () => {
  it('dials with the bearer token, and names the session only when resuming one', () => {
    expect(dialHeaders('wsmet_x', { operatorVersion: '0.4.2', sessionId: null })).toEqual({
      Authorization: 'Bearer wsmet_x',
      'User-Agent': 'wingsmith-operator/0.4.2',
    });
    expect(dialHeaders('wsmet_x', { operatorVersion: '0.4.2', sessionId: 'S1' })).toMatchObject({ 'Wingsmith-Session': 'S1' });
    // An id no header can carry (kept by an older SDK) is left out rather than failing every dial.
    expect(dialHeaders('wsmet_x', { operatorVersion: '0.4.2', sessionId: 'S\u2603' })).not.toHaveProperty('Wingsmith-Session');
  });

  it('hello carries resume_from and lossy only within a session being resumed', () => {
    const base = { clusterId: 'c1', operatorVersion: '0.4.2', durableCursor: 7, lossy: true };
    expect(helloFor({ ...base, sessionId: null })).toEqual({ cluster_id: 'c1', operator_version: '0.4.2', session_id: null, resume_from: null, lossy: false });
    expect(helloFor({ ...base, sessionId: 'S1' })).toEqual({ cluster_id: 'c1', operator_version: '0.4.2', session_id: 'S1', resume_from: 7, lossy: true });
  });

  it('the url names the hub, with or without /v1/connect and a trailing slash: the path is never doubled', () => {
    for (const url of ['wss://hub.example', 'wss://hub.example/', 'https://hub.example', 'wss://hub.example/v1/connect', 'wss://hub.example/v1/connect/', 'https://hub.example/v1/connect//']) {
      expect(connectUrl(url), url).toBe('wss://hub.example/v1/connect');
    }
    expect(connectUrl('https://hub.example/plane/')).toBe('wss://hub.example/plane/v1/connect');
    expect(connectUrl('http://127.0.0.1:8787/plane/v1/connect/')).toBe('ws://127.0.0.1:8787/plane/v1/connect');
  });

  it('a welcome is fresh on full_resync or another session; a resume of a lossy operator is refused', () => {
    expect(decideWelcome('S1', false, { session_id: 'S1', full_resync: false })).toEqual({ kind: 'resume' });
    expect(decideWelcome('S1', false, { session_id: 'S1', full_resync: true })).toEqual({ kind: 'fresh' });
    expect(decideWelcome('S1', false, { session_id: 'S2', full_resync: false })).toEqual({ kind: 'fresh' });
    expect(decideWelcome(null, false, { session_id: 'S2', full_resync: false })).toEqual({ kind: 'fresh' });
    expect(decideWelcome('S1', true, { session_id: 'S1', full_resync: false })).toMatchObject({ kind: 'refuse' });
    expect(decideWelcome('S1', true, { session_id: 'S9', full_resync: true })).toEqual({ kind: 'fresh' });
  });
});

describe('frame triage', () => {
  const read = (text: string) => {
    const r = readFrame(text);
    if (r.kind === 'fatal') throw new Error(r.reason);
    return r;
  };
  const welcome = read(frameFrom(fixture('welcome')));
  const connError = read(frameFrom(fixture('error.connection')));
  const seqError = read(frameFrom(fixture('error'), { seq: 4 }));
  const desired = read(frameFrom(fixture('deployment.desired'), { seq: 5 }));

  it('welcome once, then a second one closes; an unreadable one closes', () => {
    expect(triage(welcome, false)).toMatchObject({ do: 'welcome' });
    expect(triage(welcome, true)).toEqual({ do: 'close', reason: 'a second welcome' });
    const bad = read(frameFrom(fixture('welcome'), { payload: { session_id: 1 } }));
    expect(triage(bad, false)).toMatchObject({ do: 'close', reason: expect.stringMatching(/unreadable welcome/) });
  });

  it('a connection-level error is read before and after the welcome; a numbered one before the welcome too', () => {
    expect(triage(connError, false)).toMatchObject({ do: 'connection-error', payload: fixture('error.connection').envelope.payload });
    expect(triage(connError, true)).toMatchObject({ do: 'connection-error' });
    expect(triage(seqError, false)).toMatchObject({ do: 'connection-error' });
    expect(triage(seqError, true)).toEqual({ do: 'sequenced', seq: 4 });
  });

  it('pings are answered in either form; pong and ack need nothing more; a hello from the hub is odd', () => {
    expect(triage(read(canonicalPing(3)), true)).toEqual({ do: 'answer-ping' });
    expect(triage(read(buildFrame({ type: 'ping', payload: {}, ack: 3 })), true)).toEqual({ do: 'answer-ping' });
    expect(triage(read(canonicalPong(3)), true)).toEqual({ do: 'ignore', warn: null });
    expect(triage(read(frameFrom(fixture('ack'))), true)).toEqual({ do: 'ignore', warn: null });
    expect(triage(read(frameFrom(fixture('hello'))), true)).toMatchObject({ do: 'ignore', warn: expect.stringMatching(/hello/) });
  });

  it('sequenced frames are for the session: before the welcome they close the link', () => {
    expect(triage(desired, true)).toEqual({ do: 'sequenced', seq: 5 });
    expect(triage(desired, false)).toEqual({ do: 'close', reason: 'sequenced deployment.desired before welcome' });
  });
});

describe('refusal classification', () => {
  const closed = (o: Partial<ClosedLink>): ClosedLink => ({ closeCode: 1006, reason: '', httpStatus: null, welcomed: false, error: null, ...o });
  const err = (retryable: boolean) => ({ code: 'invalid', message: 'm', retryable });

  it('ordinary closes are no refusal', () => {
    expect(classifyClose(closed({}))).toBeNull();
    expect(classifyClose(closed({ closeCode: 4408 }))).toBeNull();
    expect(classifyClose(closed({ closeCode: 4400, welcomed: true, error: err(false) }))).toBeNull();
    expect(classifyClose(closed({ closeCode: 1013, welcomed: true, error: err(true) }))).toBeNull();
    expect(classifyClose(closed({ httpStatus: 503 }))).toBeNull();
  });

  it('refusals, what each waits, and which one forgets the session', () => {
    expect(classifyClose(closed({ httpStatus: 401 }))).toMatchObject({ kind: 'unauthorized', waitCap: true, forgetSession: false });
    expect(classifyClose(closed({ httpStatus: 403 }))).toMatchObject({ kind: 'unauthorized', waitCap: true });
    expect(classifyClose(closed({ closeCode: 4403, welcomed: true, error: err(false) }))).toMatchObject({ kind: 'refused', waitCap: true, forgetSession: false });
    expect(classifyClose(closed({ closeCode: 4403 }))).toMatchObject({ kind: 'refused', error: null });
    expect(classifyClose(closed({ closeCode: 4409, welcomed: true }))).toMatchObject({ kind: 'displaced', waitCap: true, forgetSession: true });
    expect(classifyClose(closed({ closeCode: 4400, error: err(false) }))).toMatchObject({ kind: 'handshake', waitCap: true });
    expect(classifyClose(closed({ closeCode: 1013, error: err(true) }))).toMatchObject({ kind: 'handshake', waitCap: false });
  });

  it("an HTTP refusal's JSON body is its error; anything else is none", () => {
    expect(httpRefusalError('{"error":{"code":"unauthorized","message":"an enrollment token is required"}}')).toEqual({
      code: 'unauthorized',
      message: 'an enrollment token is required',
      retryable: false,
    });
    expect(httpRefusalError('<html>')).toBeNull();
    expect(httpRefusalError('{"error":"nope"}')).toBeNull();
  });

  it('an HTTP 5xx or 429 at the upgrade says "not now": retryable, the ordinary backoff, a warning', () => {
    const body = '{"error":{"code":"unavailable","message":"the cluster registry is unavailable; retry with backoff"}}';
    for (const status of [500, 502, 503, 429]) expect(httpRefusalError(body, status)).toMatchObject({ retryable: true });
    for (const status of [400, 401, 403, 404]) expect(httpRefusalError(body, status)).toMatchObject({ retryable: false });
    const outage = classifyClose(closed({ httpStatus: 503, error: httpRefusalError(body, 503) }))!;
    expect(outage).toMatchObject({ kind: 'handshake', waitCap: false, forgetSession: false });
    expect(refusalLogLine(outage, 5_500)).toMatchObject({ level: 'warn', fields: { http_status: 503, retryable: true } });
  });

  it('Retry-After: seconds or a date; honoured within the cap, with the backoff draw on top', () => {
    expect(retryAfterMs('5', 0)).toBe(5_000);
    expect(retryAfterMs(' 0 ', 0)).toBe(0);
    expect(retryAfterMs(new Date(12_000).toUTCString(), 2_000)).toBe(10_000);
    expect(retryAfterMs('soon', 0)).toBeNull();
    expect(retryAfterMs(undefined, 0)).toBeNull();
    expect(afterRetryAfter(500, null, 30_000)).toBe(500);
    expect(afterRetryAfter(500, 5_000, 30_000)).toBe(5_500);
    expect(afterRetryAfter(500, 29_800, 30_000)).toBe(30_000);
    expect(afterRetryAfter(500, 3_600_000, 30_000)).toBe(30_000);
  });

  it('one log line, naming the displacement for what it is', () => {
    const displaced = classifyClose(closed({ closeCode: 4409, error: err(false) }))!;
    expect(refusalLogLine(displaced, 30_000).msg).toMatch(/another operator holds this cluster/);
    expect(refusalLogLine(classifyClose(closed({ closeCode: 4403 }))!, 30_000)).toMatchObject({ level: 'error', msg: 'the hub refused this operator', fields: { retry_in_ms: 30_000 } });
  });

  it('a refusal the hub says is retryable is a warning; one that needs a person is an error', () => {
    const outage = classifyClose(closed({ closeCode: 1013, error: err(true) }))!;
    expect(refusalLogLine(outage, 400)).toMatchObject({ level: 'warn', fields: { retryable: true, close_code: 1013, retry_in_ms: 400 } });
    expect(refusalLogLine(classifyClose(closed({ closeCode: 4400, error: err(false) }))!, 30_000).level).toBe('error');
    expect(refusalLogLine(classifyClose(closed({ closeCode: 4409, error: err(false) }))!, 30_000).level).toBe('error');
    expect(refusalLogLine(classifyClose(closed({ httpStatus: 401 }))!, 30_000).level).toBe('error');
  });
});

describe('the writer: window and admission of one frame', () => {
  it('the window is open below both limits', () => {
    expect(windowOpen(limits, 2, 2_499)).toBe(true);
    expect(windowOpen(limits, 3, 0)).toBe(false);
    expect(windowOpen(limits, 0, 2_500)).toBe(false);
  });

  it('too big is never sent; a frame that does not fit the bytes left waits, unless the window is empty', () => {
    expect(admit(1_001, limits, 0, 0)).toBe('too-big');
    expect(admit(1_000, limits, 0, 0)).toBe('write');
    expect(admit(900, limits, 2, 1_700)).toBe('wait');
    expect(admit(800, limits, 2, 1_700)).toBe('write');
    expect(admit(900, limits, 0, 1_700)).toBe('write');
  });
});

describe('liveness and retries', () => {
  it('the silence rule: expired at the limit, else look again when it would be', () => {
    expect(silence(10_000, 0, 30_000)).toEqual({ expired: false, checkInMs: 20_000 });
    expect(silence(30_000, 0, 30_000)).toEqual({ expired: true, silentMs: 30_000 });
    expect(silence(45_000, 10_000, 30_000)).toEqual({ expired: true, silentMs: 35_000 });
  });

  it('a transient failure is retried at 500 ms doubling to the 30 s cap', () => {
    const policy = { baseMs: 500, capMs: 30_000 };
    expect([0, 1, 2, 5, 6, 7, 100].map((a) => retryDelay(policy, a))).toEqual([500, 1_000, 2_000, 16_000, 30_000, 30_000, 30_000]);
  });
});

describe('stop', () => {
  const view = (o: Partial<DrainView>): DrainView => ({
    linkOpen: true,
    outboxEmpty: true,
    unacked: 0,
    inboundPending: 0,
    runningOperations: 0,
    lastAckSent: 5,
    cursor: 5,
    ...o,
  });

  it('drained when nothing is waiting either way and the cursor is acked; without a link nothing more can drain', () => {
    expect(isDrained(view({}))).toBe(true);
    for (const o of [{ outboxEmpty: false }, { unacked: 1 }, { inboundPending: 1 }, { runningOperations: 1 }, { lastAckSent: 4 }]) {
      expect(isDrained(view(o)), JSON.stringify(o)).toBe(false);
    }
    expect(isDrained(view({ linkOpen: false, unacked: 3 }))).toBe(true);
    // A handler still running settles without a link, and what it applies belongs in the final record.
    expect(isDrained(view({ linkOpen: false, inboundPending: 1 }))).toBe(false);
  });

  it('clean only when graceful and nothing was left over', () => {
    expect(isCleanStop(true, view({}))).toBe(true);
    expect(isCleanStop(false, view({}))).toBe(false);
    expect(isCleanStop(true, view({ unacked: 1 }))).toBe(false);
    expect(isCleanStop(true, view({ runningOperations: 1 }))).toBe(false);
  });
});

describe('session state', () => {
  function numbered(n: number) {
    const s = new SessionState(new MemoryOutboundLog());
    s.fresh('S1');
    for (let i = 0; i < n; i++) s.outbound.stamp((seq) => `frame ${seq}`);
    return s;
  }

  it('a fresh session restarts numbering both ways and drops the replay buffer and the open snapshots', () => {
    const s = numbered(3);
    s.inbound.arrive(1);
    s.inbound.settle(1, 'applied');
    s.streams.begin('B', ['deployment']);
    expect(s.fresh('S2')).toEqual({ dropped: 3, droppedEvents: 0, removals: [] });
    expect(s).toMatchObject({ id: 'S2', lossy: false, gen: 2 });
    expect(s.outbound.nextSeq).toBe(1);
    expect(s.inbound.cursor).toBe(0);
    expect(s.record(false, []).hubSnapshotOpen).toBe(false);
  });

  it('the note of a hub snapshot cut by a stop stays in the record until a fresh session supersedes it', () => {
    const s = new SessionState(new MemoryOutboundLog());
    const cut = { ...emptyRecord(), sessionId: 'S1', clean: true, outbound: { nextSeq: 5, peerAck: 4, lostThrough: 0 }, hubSnapshotOpen: true };
    s.restore(cut, silentLogger);
    expect(s.lossy).toBe(true);
    // A process that never reaches the hub saves its record: the note must survive it.
    expect(s.record(true, []).hubSnapshotOpen).toBe(true);
    s.fresh('S2');
    expect(s.record(true, []).hubSnapshotOpen).toBe(false);
  });

  it('a resume replays what the hub has not acknowledged; a point it cannot serve makes the operator lossy', () => {
    const s = numbered(3);
    const plan = s.resume(1);
    expect(plan.ok && plan.replay.map((e) => e.frame)).toEqual(['frame 2', 'frame 3']);
    expect(s.lossy).toBe(false);
    expect(s.resume(9)).toEqual({ ok: false, reason: 'ahead_of_sent' });
    expect(s.lossy).toBe(true);
  });

  it('a displaced session is forgotten: the record keeps it for diagnostics only, and an open snapshot is recorded', () => {
    const s = numbered(1);
    s.streams.begin('B', ['deployment']);
    expect(s.record(false, [])).toMatchObject({ sessionId: 'S1', hubSnapshotOpen: true, displacedSession: null });
    s.forget();
    expect(s.record(false, [])).toMatchObject({ sessionId: null, displacedSession: 'S1' });
    s.forget();
    expect(s.displaced).toBe('S1');
  });
});
