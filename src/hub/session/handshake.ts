/**
 * The handshake's decisions, pure: is this a hello the session may answer, may it resume, what
 * does a fresh session start from, what does the welcome say. The session object performs the
 * effects (the claim, the sockets, storage) around them.
 */
import { answerableId, checkOperatorVersion, CloseCode, cutText, newId, readFrame, type ErrorCode, type Payload } from '../../protocol';
import { INTERNAL_HEADERS } from '../address';
import type { HubConfig } from '../config';
import type { Displacement, Refusal } from '../db/ownership';
import { welcomeRegion } from '../region';
import type { Attachment } from './sockets';
import { ZERO_COUNTERS, type SessionMeta } from './store';

/**
 * The upgrade the Worker forwarded, as the connection's attachment, or the HTTP answer to an
 * upgrade that did not come through the admission route (the headers are the Worker's, never
 * the operator's).
 */
export function admitConnect(h: Headers, now: number, cid: string): Attachment | { status: number; message: string } {
  const [clusterUid, clusterName, tokenHash, routeKey] = [
    h.get(INTERNAL_HEADERS.clusterUid),
    h.get(INTERNAL_HEADERS.clusterName),
    h.get(INTERNAL_HEADERS.tokenHash),
    h.get(INTERNAL_HEADERS.routeKey),
  ];
  if (!clusterUid || !clusterName || !tokenHash || !routeKey) return { status: 400, message: 'not an admitted connect' };
  if (h.get('upgrade')?.toLowerCase() !== 'websocket') return { status: 426, message: 'expected a WebSocket upgrade' };
  const remoteAddr = h.get(INTERNAL_HEADERS.remoteAddr);
  return { cid, phase: 'handshake', acceptedAt: now, clusterUid, clusterName, tokenHash, routeKey, remoteAddr, sessionId: null };
}

/** The error a refusal is explained with, before its 4403. */
export const REFUSAL_ERRORS: Record<Refusal, { code: ErrorCode; message: string }> = {
  not_registered: { code: 'not_found', message: 'cluster is not registered' },
  disabled: { code: 'conflict', message: 'cluster is disabled' },
  // The connect route, which cannot tell a rotated token from an unknown one, says not_found too:
  // one rotation is one code, on the live link and at the next dial.
  token_rotated: { code: 'not_found', message: 'enrollment token was rotated' },
};

export type HelloCheck =
  | { ok: true; hello: Payload<'hello'>; replyTo: string | null; fromSource: boolean }
  | { ok: false; close: number; replyTo: string | null; code: ErrorCode; message: string };

/**
 * The first frame of a connection: it must be a readable hello naming the token's cluster, from
 * an operator of the plane's major (a build from source is admitted, and said so).
 */
export function checkHello(text: string, cluster: { uid: string; name: string }, hubVersion: string): HelloCheck {
  const refuse = (replyTo: string | null, message: string): HelloCheck => ({
    ok: false,
    close: CloseCode.PROTOCOL_ERROR,
    replyTo,
    code: 'invalid',
    message,
  });
  const f = readFrame(text);
  if (f.kind === 'fatal') return refuse(f.id, f.reason);
  const replyTo = answerableId(f.envelope.id);
  if (f.envelope.type !== 'hello') return refuse(replyTo, `the first frame must be hello, got ${cutText(f.envelope.type, 64)}`);
  if (f.kind !== 'message' || f.message.type !== 'hello') return refuse(replyTo, f.kind === 'poison' ? f.reason : 'malformed hello');
  const hello = f.message.payload;
  if (hello.cluster_id !== cluster.uid && hello.cluster_id !== cluster.name) {
    return refuse(replyTo, 'hello.cluster_id does not name the cluster this token belongs to');
  }
  const verdict = checkOperatorVersion(hello.operator_version, hubVersion);
  if (!verdict.admitted) return refuse(replyTo, verdict.reason);
  return { ok: true, hello, replyTo, fromSource: !verdict.release };
}

/**
 * Why this hello cannot resume, from what the object itself knows: no record of the session,
 * lossy, a changed token, or a point that has left the buffer (the claim may add one more: a lost
 * claim). Null when it may.
 */
export function localFreshReason(
  meta: SessionMeta | null,
  hello: Payload<'hello'>,
  tokenHash: string,
  outbound: { resumeProblem(resumeFrom: number): string | null },
): string | null {
  if (!meta || hello.session_id === null || hello.session_id !== meta.sessionId) return 'no record of the session';
  if (hello.lossy) return 'operator is lossy';
  if (meta.tokenHash !== tokenHash) return 'enrollment token changed';
  if (hello.resume_from === null) return 'no resume point';
  const problem = outbound.resumeProblem(hello.resume_from);
  return problem === null ? null : `resume point ${hello.resume_from} unavailable (${problem})`;
}

/** The claim said whose session this is: a session that lost its claim to another never resumes. */
export function resumeAfterClaim(localReason: string | null, askedSession: string | undefined, claimedSession: string | null): string | null {
  if (localReason !== null) return localReason;
  return claimedSession === askedSession ? null : 'the session lost its claim to another session; a displaced session is never resumed';
}

/** A fresh session: numbering restarts at 1 both ways, and the hub's resync comes first. */
export function freshSessionMeta(a: {
  sessionId: string;
  cluster: { uid: string; name: string };
  tokenHash: string;
  routeKey: string;
  generation: number;
  desiredRevision: number;
  out: SessionMeta['out'];
  now: number;
}): SessionMeta {
  return {
    sessionId: a.sessionId,
    clusterUid: a.cluster.uid,
    clusterName: a.cluster.name,
    tokenHash: a.tokenHash,
    routeKey: a.routeKey,
    openedAt: a.now,
    generation: a.generation,
    inCursor: 0,
    out: a.out,
    desiredWatermark: 0,
    opResyncs: {},
    hubResync: { beginId: newId(a.now), revision: a.desiredRevision, after: null, count: 0, stage: 'begin' },
    lastFrameAt: a.now,
    disconnectedAt: null,
    counters: { ...ZERO_COUNTERS },
  };
}

export function welcomePayload(cfg: HubConfig, sessionId: string, ackSeq: number, fresh: boolean): Payload<'welcome'> {
  return {
    session_id: sessionId,
    ack_seq: ackSeq,
    full_resync: fresh,
    hub_version: cfg.HUB_VERSION,
    ...welcomeRegion(cfg),
    limits: {
      ping_interval_s: cfg.PING_INTERVAL_MS / 1000,
      idle_timeout_s: cfg.IDLE_TIMEOUT_MS / 1000,
      max_frame_bytes: cfg.MAX_FRAME_BYTES,
      replay_buffer_frames: cfg.REPLAY_BUFFER_FRAMES,
      replay_buffer_bytes: cfg.REPLAY_BUFFER_BYTES,
    },
  };
}

/** A claim taken from another connected session: what to log, loudly once per contention episode. */
export function displacementLog(d: Displacement, contentionStarted: boolean): { level: 'warn' | 'info'; message: string; fields: Record<string, string | null> } {
  return {
    level: contentionStarted ? 'warn' : 'info',
    message: contentionStarted
      ? 'CONTENTION: the claim of this cluster keeps changing hands between sessions; are two operators running with one enrollment token?'
      : 'claim taken from another connected session',
    fields: {
      displaced_session: d.from.session_id,
      displaced_remote_addr: d.from.remote_addr,
      displaced_operator_version: d.from.operator_version,
      session: d.to.session_id,
      remote_addr: d.to.remote_addr,
      operator_version: d.to.operator_version,
    },
  };
}
