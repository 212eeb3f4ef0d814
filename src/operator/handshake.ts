/**
 * The handshake's decisions, pure: what to dial with, what `hello` says, and whether a `welcome`
 * opened a fresh session or resumed the one asked for (the spec's "Full resync" rules).
 */
import { HEADER_SAFE_RE, HelloPayload, MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES, type Payload } from '../protocol';
import { DEFAULT_LIMITS } from './client-types';

export const SESSION_HEADER = 'Wingsmith-Session';

export interface HandshakeState {
  clusterId: string;
  operatorVersion: string;
  /** The session to resume (null: ask for a new one). */
  sessionId: string | null;
  /** The durable contiguous cursor of the hub's stream in that session. */
  durableCursor: number;
  /** This operator cannot serve as a resume base. */
  lossy: boolean;
}

/**
 * The token as the Authorization header will carry it. Whitespace around it is not part of it
 * (RFC 9110 5.5; the hub trims it too), and a token read from a Secret file (or a Secret made
 * `--from-file`, then passed as an env var) keeps that file's last line break:
 * Node refuses to write that into a header, and every dial failed like a network outage, retried
 * for ever without a refusal anyone would see. Anything else no header can carry is a
 * configuration error, said at once; the message never quotes the secret.
 */
export function bearerToken(token: string): string {
  const t = typeof token === 'string' ? token.trim() : '';
  if (!HEADER_SAFE_RE.test(t)) {
    throw new TypeError('token: an enrollment token is printable ASCII without spaces (wsmet_…); this one cannot be sent in an HTTP header');
  }
  return t;
}

/**
 * The cluster id and operator version as every `hello` (and the version as the User-Agent) will
 * carry them, checked once at construction. A version read from a VERSION file keeps its last
 * line break, and Node refuses to write that into a header: every dial failed like a network
 * outage (an info line and a retry, for ever), as a token's did. Surrounding whitespace is
 * dropped; a version no header can carry, or either value out of the hello's bounds (which the
 * hub refuses on every connect), is a configuration error, said at once.
 */
export function helloIdentity(clusterId: string, operatorVersion: string): { clusterId: string; operatorVersion: string } {
  if (!HelloPayload.shape.cluster_id.safeParse(clusterId).success) {
    throw new TypeError('clusterId: the cluster\'s uid or name, 1 to 253 characters');
  }
  const version = typeof operatorVersion === 'string' ? operatorVersion.trim() : '';
  if (!HelloPayload.shape.operator_version.safeParse(version).success || !/^[\x20-\x7E]+$/.test(version)) {
    throw new TypeError('operatorVersion: 1 to 128 printable ASCII characters (0.4.2, or a build name)');
  }
  return { clusterId, operatorVersion: version };
}

export function dialHeaders(token: string, s: Pick<HandshakeState, 'operatorVersion' | 'sessionId'>): Record<string, string> {
  const headers: Record<string, string> = {
    Authorization: `Bearer ${token}`,
    'User-Agent': `wingsmith-operator/${s.operatorVersion}`,
  };
  // A record written before welcomes were checked may hold an id no header can carry: without
  // the header the hub routes by the hello alone (a fresh session), instead of every dial failing.
  if (s.sessionId && HEADER_SAFE_RE.test(s.sessionId)) headers[SESSION_HEADER] = s.sessionId;
  return headers;
}

/** `resume_from` and `lossy` only mean something within a session being resumed. */
export function helloFor(s: HandshakeState): Payload<'hello'> {
  const resuming = s.sessionId !== null;
  return {
    cluster_id: s.clusterId,
    operator_version: s.operatorVersion,
    session_id: s.sessionId,
    resume_from: resuming ? s.durableCursor : null,
    lossy: resuming ? s.lossy : false,
  };
}

export type WelcomeDecision = { kind: 'fresh' } | { kind: 'resume' } | { kind: 'refuse'; reason: string };

/**
 * A welcome is a fresh session when it says `full_resync` or names another session than the one
 * asked for. A resume of a session this operator declared lossy is refused: resuming would
 * pretend it can replay what it lost.
 */
export function decideWelcome(
  asked: string | null,
  lossy: boolean,
  w: Pick<Payload<'welcome'>, 'session_id' | 'full_resync'>,
): WelcomeDecision {
  if (w.full_resync || w.session_id !== asked) return { kind: 'fresh' };
  if (lossy) return { kind: 'refuse', reason: 'the hub resumed a session this operator declared lossy' };
  return { kind: 'resume' };
}

export type BoundedLimit = keyof Payload<'welcome'>['limits'];

/** A limit of a welcome that was out of bounds, and the value used instead. */
export interface LimitAdjustment {
  field: BoundedLimit;
  got: number;
  used: number;
  bounds: readonly [number, number];
}

/** The spec's values ("The operator sends ping every 10s", "no frame of any kind for 30s"). */
export const SPEC_PING_INTERVAL_S = 10;
export const SPEC_IDLE_TIMEOUT_S = 30;
/** The fastest ping cadence a hub may ask of an operator. */
export const MIN_PING_INTERVAL_S = 1;
/**
 * The largest replay window an operator keeps, whatever a hub advertises: twice the hub's default
 * frames (50,000) and four times its default bytes (64 MiB).
 */
export const MAX_REPLAY_BUFFER_FRAMES = 100_000;
export const MAX_REPLAY_BUFFER_BYTES = 256 * 1024 * 1024;

/**
 * The welcome's limits as the operator will use them. `welcome.limits` is the hub's input,
 * and the schema only asks for positive numbers: taken as they come, a buggy or hostile hub could
 * make an operator ping a thousand times a second or drop every healthy link at once. The bounds
 * come from the spec's liveness sentences:
 *
 * - ping interval in [1 s, 10 s]. "The operator sends ping every 10s": a hub may ask for pings
 *   more often (a shorter silence rule of its own), never less, or its 30 s silence rule would
 *   stop hearing from an idle operator. The 1 s floor bounds what a hub can make an idle fleet
 *   send at ten times the spec's rate.
 * - idle limit in [2 × ping interval, 30 s]. "A peer that has seen no frame of any kind for 30s
 *   considers the connection dead": a longer limit keeps a dead link (and delays the reconnect
 *   that replaces it) past what the spec allows. The floor: on an idle link the hub's pong to
 *   each ping is all the operator hears, so a limit under two ping intervals would drop a healthy
 *   link over one late pong. (No absolute floor: a hub that pings every 1 s may hold a 2–3 s limit,
 *   which is how the end-to-end suites run.)
 *
 * - max_frame_bytes in [MIN_FRAME_LIMIT_BYTES, MAX_FRAME_LIMIT_BYTES] (4 KiB, 32 MiB): below it the
 *   operator would refuse to send nearly every frame, one at a time, and resume nothing; above
 *   it a frame the limit allows is cut by a runtime (the SDK's own socket takes 32 MiB at most).
 *   Replaced by the hub's default (1 MiB): a hub that really means less closes 1009 on a larger
 *   frame, which is loud.
 * - replay_buffer_frames and _bytes at most MAX_REPLAY_BUFFER_FRAMES and _BYTES. They bound
 *   what the operator holds written and unacknowledged, in memory and in its outbound log: taken
 *   as they come, a hub advertising 1e15 (a safe integer, so the schema admits it) would make every
 *   report numbered at once and kept until acknowledged, with no bound at all, instead of
 *   waiting in the coalescing queue. Replaced by the SDK's defaults (10,000 frames, 64 MiB): a
 *   smaller window than the hub allows costs throughput, never correctness.
 *
 * A value out of its bounds is replaced by the spec's own value, not clamped to the nearest bound:
 * a hub outside them is misconfigured, and the spec's value is the one known to be sane. Pure.
 */
export function boundedLimits(limits: Payload<'welcome'>['limits']): { limits: Payload<'welcome'>['limits']; adjusted: LimitAdjustment[] } {
  const adjusted: LimitAdjustment[] = [];
  const bound = (field: BoundedLimit, got: number, lo: number, hi: number, spec: number): number => {
    if (Number.isFinite(got) && got >= lo && got <= hi) return got;
    adjusted.push({ field, got, used: spec, bounds: [lo, hi] });
    return spec;
  };
  const ping = bound('ping_interval_s', limits.ping_interval_s, MIN_PING_INTERVAL_S, SPEC_PING_INTERVAL_S, SPEC_PING_INTERVAL_S);
  const idle = bound('idle_timeout_s', limits.idle_timeout_s, 2 * ping, SPEC_IDLE_TIMEOUT_S, SPEC_IDLE_TIMEOUT_S);
  const frame = bound('max_frame_bytes', limits.max_frame_bytes, MIN_FRAME_LIMIT_BYTES, MAX_FRAME_LIMIT_BYTES, DEFAULT_LIMITS.max_frame_bytes);
  const replayFrames = bound('replay_buffer_frames', limits.replay_buffer_frames, 1, MAX_REPLAY_BUFFER_FRAMES, DEFAULT_LIMITS.replay_buffer_frames);
  const replayBytes = bound('replay_buffer_bytes', limits.replay_buffer_bytes, 1, MAX_REPLAY_BUFFER_BYTES, DEFAULT_LIMITS.replay_buffer_bytes);
  return {
    limits: { ping_interval_s: ping, idle_timeout_s: idle, max_frame_bytes: frame, replay_buffer_frames: replayFrames, replay_buffer_bytes: replayBytes },
    adjusted,
  };
}
