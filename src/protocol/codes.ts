import { utf8Length } from './sequencing';

/** WebSocket close codes of the protocol (DESIGN.md, "Fixed interfaces"). */
export const CloseCode = {
  /** Clean end (also used instead of echoing 1005/1006, which hangs some clients). */
  NORMAL: 1000,
  /** A frame larger than welcome.limits.max_frame_bytes. */
  TOO_BIG: 1009,
  /** The hub hit an unexpected condition of its own. */
  INTERNAL: 1011,
  /** The hub cannot apply now (database unavailable, a hole older than its limit): reconnect and replay. */
  TRY_AGAIN_LATER: 1013,
  /** Protocol error: bad handshake, gap, undecodable envelope, `v` out of range, second hello. */
  PROTOCOL_ERROR: 4400,
  /** Refused: cluster not registered, disabled, or token rotated. */
  REFUSED: 4403,
  /** No hello in time, or silence past the idle limit. */
  TIMEOUT: 4408,
  /** Displaced by a newer session for the same cluster. */
  DISPLACED: 4409,
  /** The hub's send queue is full. */
  SEND_QUEUE_FULL: 4429,
} as const;
export type CloseCode = (typeof CloseCode)[keyof typeof CloseCode];

/** The error frame's `code` values. */
export const ERROR_CODES = ['not_found', 'invalid', 'conflict', 'unavailable', 'internal', 'deadline'] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** RFC 6455 §5.5: a close frame's reason is at most 123 bytes of UTF-8. */
export const CLOSE_REASON_BYTES = 123;

/**
 * A close reason a socket can carry. Reasons quote the peer's own text (a frame's `type`, up to a
 * frame of anything), and a socket throws past 123 bytes: the close never happens (`ws` throws out
 * of the message handler, killing the operator; workerd leaves the hub's socket open). Cut at a
 * code point, never inside one.
 */
export function closeReason(reason: string): string {
  if (utf8Length(reason) <= CLOSE_REASON_BYTES) return reason;
  let out = '';
  let bytes = 0;
  for (const ch of reason) {
    const n = utf8Length(ch);
    if (bytes + n > CLOSE_REASON_BYTES - 3) break;
    out += ch;
    bytes += n;
  }
  return `${out}…`;
}
