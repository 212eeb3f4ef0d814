/**
 * The session object's pure policies, in Node: the handshake's decisions, the clock, the triage
 * of an open session's frames and the settlement of a committed batch. Frames come from the
 * fixtures (what a real operator sends); the hub's behaviour around them is tested in workerd
 * (test/hub).
 */
import { describe, expect, it } from 'vitest';
import { hubConfig } from '../../../src/hub/config';
import { INTERNAL_HEADERS } from '../../../src/hub/address';
import { closeGraceMs, dueNow, handshakeDeadline, nextDeadline, releaseDue, type ClockState } from '../../../src/hub/session/clock';
import {
  admitConnect,
  checkHello,
  freshSessionMeta,
  localFreshReason,
  resumeAfterClaim,
  welcomePayload,
} from '../../../src/hub/session/handshake';
import { settleCommitted, triageFrame } from '../../../src/hub/session/inbound';
import { buildBatch } from '../../../src/hub/session/ingest-batch';
import { CloseCode, InboundSequencer, MemoryReplayStore, newId, OutboundSequencer, readFrame, type Incoming } from '../../../src/protocol';
import { fixture, frameFrom } from '../../support/fixtures';

const cfg = hubConfig({ HUB_VERSION: '0.4.2', HANDSHAKE_TIMEOUT_MS: '10000', IDLE_TIMEOUT_MS: '30000', HOLE_TIMEOUT_MS: '30000', RETENTION_MS: '900000' });
const cluster = { uid: '01J9X2E5G7QK8V3B0YHN4TZC6M', name: 'gpu-east-1' };

const hello = (payload: Record<string, unknown> = {}) =>
  frameFrom(fixture('hello'), { payload: { ...fixture('hello').envelope.payload, cluster_id: 'gpu-east-1', operator_version: '0.4.0', ...payload } });

describe('handshake', () => {
  it('admits a hello naming the token cluster by name or uid, from the same major or a build from source', () => {
    expect(checkHello(hello(), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: true, fromSource: false });
    expect(checkHello(hello({ cluster_id: cluster.uid }), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: true });
    expect(checkHello(hello({ operator_version: 'dev' }), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: true, fromSource: true });
  });

  it('refuses with 4400 and a reason: not a hello first, a malformed hello, another cluster, another major', () => {
    const ping = frameFrom(fixture('ping'), { ack: 0 });
    expect(checkHello(ping, cluster, cfg.HUB_VERSION)).toMatchObject({ ok: false, close: CloseCode.PROTOCOL_ERROR, message: expect.stringMatching(/first frame must be hello/) });
    expect(checkHello(hello({ lossy: 'yes' }), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: false, close: CloseCode.PROTOCOL_ERROR });
    expect(checkHello(hello({ cluster_id: 'other' }), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: false, message: expect.stringMatching(/does not name the cluster/) });
    expect(checkHello(hello({ operator_version: '1.0.0' }), cluster, cfg.HUB_VERSION)).toMatchObject({ ok: false, code: 'invalid' });
    expect(checkHello('{', cluster, cfg.HUB_VERSION)).toMatchObject({ ok: false, replyTo: null });
  });

  it('a resume needs the session, not lossy, the same token and a point still in the buffer; a lost claim never resumes', () => {
    const out = new OutboundSequencer(new MemoryReplayStore(), { frames: 10, bytes: 1 << 20 });
    const meta = freshSessionMeta({ sessionId: 's1', cluster, tokenHash: 'aa', routeKey: 'r', generation: 3, desiredRevision: 0, out: out.snapshot(), now: 0 });
    const h = (p: Partial<{ session_id: string | null; resume_from: number | null; lossy: boolean }>) => ({
      cluster_id: 'x',
      operator_version: '0.4.0',
      session_id: 's1',
      resume_from: 0,
      lossy: false,
      ...p,
    });
    expect(localFreshReason(meta, h({}), 'aa', out)).toBeNull();
    expect(localFreshReason(null, h({}), 'aa', out)).toMatch(/no record/);
    expect(localFreshReason(meta, h({ session_id: 's2' }), 'aa', out)).toMatch(/no record/);
    expect(localFreshReason(meta, h({ lossy: true }), 'aa', out)).toMatch(/lossy/);
    expect(localFreshReason(meta, h({}), 'bb', out)).toMatch(/token changed/);
    expect(localFreshReason(meta, h({ resume_from: null }), 'aa', out)).toMatch(/no resume point/);
    expect(localFreshReason(meta, h({ resume_from: 5 }), 'aa', out)).toMatch(/ahead_of_sent/);
    expect(resumeAfterClaim(null, 's1', 's1')).toBeNull();
    expect(resumeAfterClaim(null, 's1', 'r.fresh')).toMatch(/lost its claim/);
    expect(resumeAfterClaim('operator is lossy', 's1', 's1')).toBe('operator is lossy');
  });

  it('a fresh session starts numbering at 1 with the hub resync first; the welcome carries the limits', () => {
    const m = freshSessionMeta({ sessionId: 's', cluster, tokenHash: 'aa', routeKey: 'r', generation: 1, desiredRevision: 7, out: { nextSeq: 1, peerAck: 0, lostThrough: 0 }, now: 5 });
    expect(m).toMatchObject({ inCursor: 0, desiredWatermark: 0, hubResync: { revision: 7, stage: 'begin', count: 0 }, disconnectedAt: null });
    expect(welcomePayload(cfg, 's', 0, true)).toEqual({
      session_id: 's',
      ack_seq: 0,
      full_resync: true,
      hub_version: '0.4.2',
      limits: { ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: 1 << 20, replay_buffer_frames: 50_000, replay_buffer_bytes: 64 << 20 },
    });
  });

  it('admits only an upgrade the Worker forwarded', () => {
    const h = new Headers({
      upgrade: 'websocket',
      [INTERNAL_HEADERS.clusterUid]: cluster.uid,
      [INTERNAL_HEADERS.clusterName]: cluster.name,
      [INTERNAL_HEADERS.tokenHash]: 'aa',
      [INTERNAL_HEADERS.routeKey]: 'k',
    });
    expect(admitConnect(h, 1, 'c')).toMatchObject({ phase: 'handshake', acceptedAt: 1, clusterUid: cluster.uid, remoteAddr: null });
    h.delete(INTERNAL_HEADERS.tokenHash);
    expect(admitConnect(h, 1, 'c')).toEqual({ status: 400, message: 'not an admitted connect' });
  });
});

describe('clock', () => {
  const base: ClockState<string> = { handshakes: [], active: null, oldestUnapplied: null, windowFullSince: null, ackWaitSince: null, session: null, anyOpen: false };

  it('an idle connected session has one deadline: silence, counted from its last sign of life', () => {
    const s = { ...base, active: { lastSeen: 1_000 }, session: { disconnectedAt: null }, anyOpen: true };
    expect(nextDeadline(s, cfg, 2_000)).toBe(31_000);
    expect(dueNow(s, cfg, 30_999)).toEqual([]);
    expect(dueNow(s, cfg, 31_000)).toEqual([{ t: 'silence' }]);
  });

  it('handshake deadlines per connection; a hole and a window not released are deadlines of the active one', () => {
    const s = { ...base, handshakes: [{ key: 'a', acceptedAt: 0 }, { key: 'b', acceptedAt: 5_000 }], active: { lastSeen: 9_000 }, oldestUnapplied: 1_000, windowFullSince: 2_000, anyOpen: true };
    expect(nextDeadline(s, cfg, 9_000)).toBe(10_000);
    expect(dueNow(s, cfg, 10_000)).toEqual([{ t: 'handshake', key: 'a' }]);
    expect(dueNow(s, cfg, 32_000)).toEqual([{ t: 'handshake', key: 'a' }, { t: 'handshake', key: 'b' }, { t: 'window' }]);
    expect(dueNow({ ...s, windowFullSince: null }, cfg, 31_000)).toContainEqual({ t: 'hole' });
  });

  it("handshake deadlines can be left out of the alarm's (a timer keeps them) without a handshake letting retention through", () => {
    const s = { ...base, handshakes: [{ key: 'b', acceptedAt: 5_000 }, { key: 'a', acceptedAt: 2_000 }], active: { lastSeen: 1_000 }, session: { disconnectedAt: null }, anyOpen: true };
    expect(handshakeDeadline(s, cfg)).toBe(2_000 + cfg.HANDSHAKE_TIMEOUT_MS);
    expect(nextDeadline(s, cfg, 6_000)).toBe(2_000 + cfg.HANDSHAKE_TIMEOUT_MS);
    // Without them: the active connection's silence, as before the new connection came.
    expect(nextDeadline(s, cfg, 6_000, false)).toBe(1_000 + cfg.IDLE_TIMEOUT_MS);
    expect(handshakeDeadline(base, cfg)).toBeNull();
    // A disconnected session whose operator is reconnecting: retention waits, so nothing at all.
    const back = { ...base, handshakes: [{ key: 'c', acceptedAt: 5_000 }], session: { disconnectedAt: 100 }, anyOpen: true };
    expect(nextDeadline(back, cfg, 100 + cfg.RETENTION_MS + 1, false)).toBeNull();
  });

  it('frames whose ack stood still for twice the silence limit are sent again, after any close that is due, and only on an active connection', () => {
    const s = { ...base, active: { lastSeen: 50_000 }, ackWaitSince: 1_000, session: { disconnectedAt: null }, anyOpen: true };
    expect(nextDeadline(s, cfg, 50_000)).toBe(61_000);
    expect(dueNow(s, cfg, 60_999)).toEqual([]);
    expect(dueNow(s, cfg, 61_000)).toEqual([{ t: 'resend' }]);
    // Silence, a window not released and a hole close the connection instead: the resume replays.
    expect(dueNow({ ...s, active: { lastSeen: 30_000 } }, cfg, 61_000)).toEqual([{ t: 'silence' }]);
    expect(dueNow({ ...s, windowFullSince: 20_000 }, cfg, 61_000)).toEqual([{ t: 'window' }]);
    expect(dueNow({ ...s, oldestUnapplied: 20_000 }, cfg, 61_000)).toEqual([{ t: 'hole' }]);
    // Disconnected: nothing to send on.
    expect(nextDeadline({ ...s, active: null, anyOpen: false, session: { disconnectedAt: 50_000 } }, cfg, 50_000)).toBe(50_000 + cfg.RETENTION_MS);
  });

  it('a disconnected session is forgotten after retention, not while a connection is open, and nothing is pending without one', () => {
    const s = { ...base, session: { disconnectedAt: 100 } };
    expect(nextDeadline(s, cfg, 200)).toBe(100 + cfg.RETENTION_MS);
    expect(dueNow(s, cfg, 100 + cfg.RETENTION_MS)).toEqual([{ t: 'retention' }]);
    expect(dueNow({ ...s, anyOpen: true }, cfg, 100 + cfg.RETENTION_MS)).toEqual([]);
    expect(nextDeadline(base, cfg, 0)).toBeNull();
  });

  it('while a connection is open the retention deadline is not armed either: a past one, never due, re-armed the alarm a millisecond ahead, hundreds of times a second', () => {
    const s = { ...base, session: { disconnectedAt: 100 }, anyOpen: true };
    const now = 100 + cfg.RETENTION_MS + 5_000;
    expect(dueNow(s, cfg, now)).toEqual([]);
    expect(nextDeadline(s, cfg, now)).toBeNull();
  });

  it('connections the hub closed and whose peer never answered are released after a grace, sooner than retention, and never while one is open', () => {
    const s = { ...base, session: { disconnectedAt: 1_000 }, closingSince: 1_000 };
    expect(closeGraceMs(cfg)).toBe(cfg.HANDSHAKE_TIMEOUT_MS);
    expect(nextDeadline(s, cfg, 1_000)).toBe(1_000 + closeGraceMs(cfg));
    expect(releaseDue(s, cfg, 1_000 + closeGraceMs(cfg) - 1)).toBe(false);
    expect(releaseDue(s, cfg, 1_000 + closeGraceMs(cfg))).toBe(true);
    // An open connection (the operator back already) would be cut by the release: it waits, and
    // its past deadline is not armed (it would re-arm in a loop).
    const open = { ...s, active: { lastSeen: 20_000 }, session: { disconnectedAt: null }, anyOpen: true };
    expect(releaseDue(open, cfg, 50_000)).toBe(false);
    expect(nextDeadline(open, cfg, 20_000)).toBe(20_000 + cfg.IDLE_TIMEOUT_MS);
    // An object with no session (a handshake that failed) releases them too.
    expect(nextDeadline({ ...base, closingSince: 5 }, cfg, 5)).toBe(5 + closeGraceMs(cfg));
  });
});

describe('an open session frame', () => {
  const read = (text: string) => readFrame(text) as Exclude<Incoming, { kind: 'fatal' }>;

  it('ping → pong; a second hello → 4400; pong and ack carry only their ack', () => {
    const inbound = new InboundSequencer();
    const arrive = (n: number) => inbound.arrive(n);
    const exp = () => inbound.expected;
    expect(triageFrame(read(frameFrom(fixture('ping'), { ack: 0 })), arrive, exp, 0)).toEqual({ do: 'pong' });
    expect(triageFrame(read(hello()), arrive, exp, 0)).toMatchObject({ do: 'protocol-error', reason: expect.stringMatching(/never sent again/) });
    expect(triageFrame(read(frameFrom(fixture('pong'), { ack: 0 })), arrive, exp, 0)).toEqual({ do: 'nothing' });
    expect(triageFrame(read(frameFrom(fixture('ack'), { ack: 0 })), arrive, exp, 0)).toEqual({ do: 'nothing' });
  });

  it('strict order: the expected seq is applied, a duplicate dropped, a gap a protocol error', () => {
    const inbound = new InboundSequencer();
    const t = (seq: number) => triageFrame(read(frameFrom(fixture('node.observed'), { seq })), (n) => inbound.arrive(n), () => inbound.expected, 0);
    expect(t(1)).toMatchObject({ do: 'apply', item: { seq: 1, kind: 'message' } });
    expect(t(1)).toEqual({ do: 'duplicate' });
    expect(t(3)).toMatchObject({ do: 'protocol-error', reason: 'gap: expected seq 2, got 3' });
  });

  it('an unknown type is applied (counted, acked) and answered naming the type when its batch commits; a poison frame is applied as a rejection', () => {
    const inbound = new InboundSequencer();
    const id = newId();
    const unknown = JSON.stringify({ ...JSON.parse(frameFrom(fixture('node.observed'), { seq: 1, id })), type: 'recipe.desired' });
    const u = triageFrame(read(unknown), (n) => inbound.arrive(n), () => inbound.expected, 0);
    expect(u).toEqual({ do: 'apply', item: expect.objectContaining({ kind: 'unknown', seq: 1 }) });
    const poisonId = newId();
    const poison = frameFrom(fixture('node.observed'), { seq: 2, id: poisonId, payload: { node_id: '' } });
    const p = triageFrame(read(poison), (n) => inbound.arrive(n), () => inbound.expected, 0);
    expect(p).toEqual({ do: 'apply', item: expect.objectContaining({ kind: 'poison' }) });
    if (u.do !== 'apply' || p.do !== 'apply') throw new Error('not applied');
    const items = [u.item, p.item];
    const settled = settleCommitted(items, buildBatch(items, {}), { fenced: true, pruned: 0, unknownOperations: [] }, []);
    // Answered in the order of the frames they answer.
    expect(settled.answers.map((a) => (a.kind === 'frame' ? [a.replyTo, a.answers] : null))).toEqual([[id, 1], [poisonId, 2]]);
    const first = settled.answers[0];
    if (first?.kind === 'frame') expect(first.payload()).toMatchObject({ code: 'invalid', retryable: false, unknown_type: 'recipe.desired' });
  });

  it('a committed batch settles each frame, counts, and answers every rejection it did not answer already', () => {
    const inbound = new InboundSequencer();
    const items = [1, 2, 3].map((seq) => {
      const payload = seq === 2 ? { node_id: '' } : undefined;
      const a = triageFrame(read(frameFrom(fixture('node.observed'), { seq, ...(payload ? { payload } : {}) })), (n) => inbound.arrive(n), () => inbound.expected, 0);
      if (a.do !== 'apply') throw new Error('not applied');
      return a.item;
    });
    const built = buildBatch(items, {});
    const settled = settleCommitted(items, built, { fenced: true, pruned: 0, unknownOperations: [{ seq: 9, frame_id: newId(), type: 'operation.result', reason: 'no such operation' }] }, []);
    expect(settled.outcomes).toEqual([[1, 'applied'], [2, 'dropped'], [3, 'applied']]);
    // The poison frame (seq 2) and the operation result for no operation (seq 9) are both rejections.
    expect(settled.counters).toMatchObject({ framesIn: 3, unknownTypes: 0, rejections: 2, answeredRejections: 2, desiredRefusals: 0 });
    expect(settled.answers).toHaveLength(2);
  });

  it('a frame the batch itself refuses (a hub-only type from the operator, a stream.end for no open stream) counts as a rejection, as it is recorded and answered', () => {
    const inbound = new InboundSequencer();
    const items = [frameFrom(fixture('deployment.desired'), { seq: 1 }), frameFrom(fixture('stream.end'), { seq: 2 }), frameFrom(fixture('node.observed'), { seq: 3 })].map((frame) => {
      const a = triageFrame(read(frame), (n) => inbound.arrive(n), () => inbound.expected, 0);
      if (a.do !== 'apply') throw new Error('not applied');
      return a.item;
    });
    const built = buildBatch(items, {});
    expect(built.batch.rejections.map((r) => r.seq)).toEqual([1, 2]);
    const settled = settleCommitted(items, built, { fenced: true, pruned: 0, unknownOperations: [] }, []);
    expect(settled.counters).toMatchObject({ framesIn: 3, rejections: 2, answeredRejections: 2 });
    expect(settled.answers).toHaveLength(2);
    // Counted once: their replay after a resume (committed past a hole) is not a new rejection.
    const counted: [number, number][] = [];
    settleCommitted(items, built, { fenced: true, pruned: 0, unknownOperations: [] }, counted);
    expect(settleCommitted(items, built, { fenced: true, pruned: 0, unknownOperations: [] }, counted).counters).toMatchObject({ framesIn: 0, rejections: 0, answeredRejections: 0 });
  });

  it('frames committed past a hole and committed again after a resume are counted once', () => {
    // Cursor at 2; seq 3 is held (a hole); 4 (unknown type), 5 (poison) and 6 commit past it.
    const arrive = (seqs: number[]) => {
      const inbound = new InboundSequencer();
      for (let n = 1; n < seqs[0]!; n++) inbound.arrive(n), inbound.settle(n, 'applied');
      return seqs.map((seq) => {
        const frame =
          seq === 4
            ? JSON.stringify({ ...JSON.parse(frameFrom(fixture('node.observed'), { seq })), type: 'recipe.desired' })
            : frameFrom(fixture('node.observed'), { seq, ...(seq === 5 ? { payload: { node_id: '' } } : {}) });
        const a = triageFrame(read(frame), (n) => inbound.arrive(n), () => inbound.expected, 0);
        if (a.do !== 'apply') throw new Error(`not applied: ${JSON.stringify(a)}`);
        return a.item;
      });
    };
    const committed = { fenced: true, pruned: 0, unknownOperations: [] };
    const counted: [number, number][] = [];
    const past = arrive([4, 5, 6]);
    expect(settleCommitted(past, buildBatch(past, {}), committed, counted).counters).toMatchObject({ framesIn: 3, unknownTypes: 1, rejections: 1 });
    // The resume: the operator replays from the cursor, 3 through 6.
    const replayed = arrive([3, 4, 5, 6]);
    const again = settleCommitted(replayed, buildBatch(replayed, {}), committed, counted);
    expect(again.counters).toMatchObject({ framesIn: 1, unknownTypes: 0, rejections: 0, answeredRejections: 0 });
    // The poison frame (5) was answered when it first committed: not again.
    expect(again.answers).toEqual([]);
    expect(counted).toEqual([[3, 6]]);
  });
});
