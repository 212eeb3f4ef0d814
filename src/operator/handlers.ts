import type { ErrorCode, Payload } from '../protocol';

/**
 * What an application handler says about one frame from the hub.
 *
 * - `applied`: the state it carries is durably applied (e.g. written to the cluster's CRDs).
 *   The frame is acknowledged.
 * - `transient`: it could not be applied now but a retry could succeed (API server down, lock
 *   held). The ack is withheld (the contiguous cursor stays below this frame) and the SDK retries
 *   it later; after a reconnect the hub replays it anyway.
 * - `permanent`: it can never be applied (violates an invariant of this cluster). The frame is
 *   accepted, acknowledged and dropped, logged at error level, and reported to the hub with an
 *   `error` frame (`retryable: false`, `reply_to` = the frame's id).
 *
 * A handler may also throw: a `PermanentError` is `permanent` (its message is the reason); any
 * other throw, or a return value that is none of these, is `transient`: a receiver that cannot
 * tell the two apart withholds, because a replay loop is at least visible.
 */
export type HandlerResult =
  | { ok: true }
  | { ok: false; retryable: true; reason: string }
  | { ok: false; retryable: false; reason: string; code?: ErrorCode };

export const applied = (): HandlerResult => ({ ok: true });
export const transient = (reason: string): HandlerResult => ({ ok: false, retryable: true, reason });
export const permanent = (reason: string, code: ErrorCode = 'invalid'): HandlerResult => ({
  ok: false,
  retryable: false,
  reason,
  code,
});

const PERMANENT = Symbol.for('wingsmith.operator.PermanentError');

/**
 * Throw this from a handler to reject a frame for good: the same as returning `permanent()`. The
 * frame is accepted, acknowledged and dropped, logged at error level, and answered with
 * `error {code, retryable: false, reply_to: <the frame's id>}` (`code` defaults to `invalid`).
 * Any other exception is transient: the ack is withheld and the frame retried.
 */
export class PermanentError extends Error {
  override readonly name = 'PermanentError';
  readonly [PERMANENT] = true;

  constructor(
    message: string,
    readonly code: ErrorCode = 'invalid',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** True for a `PermanentError`, also one thrown by another copy of this module. */
export function isPermanentError(err: unknown): err is PermanentError {
  return err instanceof PermanentError || (typeof err === 'object' && err !== null && (err as { [PERMANENT]?: unknown })[PERMANENT] === true);
}

/** Interpret whatever a handler produced; anything unrecognized is transient. */
export function normalizeResult(value: unknown): HandlerResult {
  if (value && typeof value === 'object') {
    const v = value as { ok?: unknown; retryable?: unknown; reason?: unknown; code?: unknown };
    if (v.ok === true) return { ok: true };
    const reason = typeof v.reason === 'string' ? v.reason : 'handler gave no reason';
    if (v.ok === false && v.retryable === false) {
      const code = typeof v.code === 'string' && ERROR_CODE_SET.has(v.code) ? (v.code as ErrorCode) : 'invalid';
      return { ok: false, retryable: false, reason, code };
    }
    if (v.ok === false && v.retryable === true) return { ok: false, retryable: true, reason };
  }
  return { ok: false, retryable: true, reason: `handler returned an unrecognized outcome: ${describe(value)}` };
}

/** Run a handler; a `PermanentError` is a permanent failure, any other throw a transient one. */
export async function runHandler(fn: () => unknown): Promise<HandlerResult> {
  try {
    return normalizeResult(await fn());
  } catch (err) {
    if (isPermanentError(err)) {
      const code = ERROR_CODE_SET.has(err.code) ? err.code : 'invalid';
      return { ok: false, retryable: false, reason: err.message || 'handler rejected the frame', code };
    }
    return { ok: false, retryable: true, reason: `handler threw: ${errorText(err)}` };
  }
}

/**
 * What an application threw or rejected with, as text, without throwing: a value with no string
 * form (a null-prototype object) or an Error whose `message` getter throws must stay the
 * application's failure, not become one of the SDK's own in the middle of settling it.
 */
export function errorText(err: unknown): string {
  try {
    return String(err instanceof Error ? err.message : err);
  } catch {
    return 'a value that cannot be shown as text';
  }
}

const ERROR_CODE_SET: ReadonlySet<string> = new Set(['not_found', 'invalid', 'conflict', 'unavailable', 'internal', 'deadline']);

function describe(v: unknown): string {
  try {
    return JSON.stringify(v)?.slice(0, 200) ?? String(v);
  } catch {
    return String(v);
  }
}

/** Context handed to the desired-state handler with each frame. */
export interface FrameContext {
  /** The frame's id (a ULID). */
  frameId: string;
  /** The frame's seq in the hub's stream. */
  seq: number;
  /** Set when the frame belongs to a hub resync snapshot: the snapshot's `resync.begin` id. */
  resyncId: string | null;
  /** How many times this frame was handed to a handler before (transient retries). */
  attempt: number;
}

/** How an operation ended. `message` is human readable (≤ 2048 characters, longer is cut). */
export interface OperationConclusion {
  outcome: 'succeeded' | 'failed' | 'cancelled';
  message?: string;
}

export interface OperationContext {
  operationId: string;
  /** The `operation.start` frame's id; every report about the operation replies to it. */
  startId: string;
  /** Wall-clock deadline (ms since the epoch). The SDK answers `error {code: 'deadline'}` when it passes. */
  deadline: number;
  /** Aborted when the deadline passes or the client stops: stop work and return `cancelled`. */
  signal: AbortSignal;
  /** Report a step (`operation.progress`). Ignored once the operation has concluded. */
  progress(phase: string, message?: string): void;
}

export interface OperatorHandlers {
  /**
   * Apply one desired deployment exactly as received: the replica bounds are this cluster's
   * share and must be rendered as they are, never summed, scaled or re-derived. Idempotent:
   * delivery is at-least-once. The SDK skips a frame whose revision is not newer than one already
   * applied for the same deployment in this session (also by a process that continued it).
   */
  desired(payload: Payload<'deployment.desired'>, ctx: FrameContext): HandlerResult | Promise<HandlerResult>;
  /**
   * After a complete hub snapshot (`stream.end {complete: true}` with a matching count): remove
   * every local desired deployment whose id is not in `keep`. Required: the hub's snapshot is
   * the only thing that removes a deployment withdrawn while this operator was away.
   */
  pruneDesired(keep: ReadonlySet<string>, ctx: FrameContext): HandlerResult | Promise<HandlerResult>;
  /**
   * Optional gate before an operation is accepted. `transient` withholds the ack of the
   * `operation.start` (it will be retried), `permanent` refuses it with an `error` frame, which
   * concludes the operation as failed. Without it every well-formed operation is accepted. A
   * start still deferred at its deadline is retried then, and answered `error {code: 'deadline'}`;
   * so is one whose gate is still deciding at its deadline (never run, whatever the gate says).
   */
  admitOperation?(payload: Payload<'operation.start'>, ctx: FrameContext): HandlerResult | Promise<HandlerResult>;
  /** Run an accepted operation to its conclusion. A throw concludes it as `failed`. */
  operation(payload: Payload<'operation.start'>, ctx: OperationContext): Promise<OperationConclusion> | OperationConclusion;
}

/** Check at construction what the types promise, for callers without a type checker. */
export function assertHandlers(handlers: unknown): asserts handlers is OperatorHandlers {
  const h = (handlers ?? {}) as Record<string, unknown>;
  for (const name of ['desired', 'pruneDesired', 'operation'] as const) {
    if (typeof h[name] !== 'function') throw new TypeError(`handlers.${name} is required and must be a function`);
  }
  if (h.admitOperation !== undefined && typeof h.admitOperation !== 'function') {
    throw new TypeError('handlers.admitOperation must be a function when given');
  }
}
