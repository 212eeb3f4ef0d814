/**
 * The handshake's decisions, pure: what to dial with, what `hello` says, and whether a `welcome`
 * opened a fresh session or resumed the one asked for (the spec's "Full resync" rules).
 */
import { HEADER_SAFE_RE, type Payload } from '../protocol';

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
