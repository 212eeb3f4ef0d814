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
