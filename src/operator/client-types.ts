/**
 * The operator client's public types: its options, events, state and counters, and the limits
 * it assumes before the hub's welcome names its own.
 */
import type { OperatorQueueCounters, OutboundState, Payload } from '../protocol';
import type { BackoffPolicy } from './backoff';
import type { CursorStore } from './cursor-store';
import type { OperatorHandlers } from './handlers';
import type { DispatchCounters } from './inbound-dispatch';
import type { Logger } from './logger';
import type { OperationBookOptions } from './operations';
import type { OutboundLog } from './outbound-log';
import type { RefusalError, RefusalKind } from './refusal';
import type { ObservedSnapshot } from './resync';
import type { HeldStorage } from './storage-watch';
import type { Timers } from './timers';
import type { Dialer } from './transport';

export type Limits = Payload<'welcome'>['limits'];

export interface OperatorClientOptions {
  /** The hub: `https://…`, `wss://…` or the full `wss://…/v1/connect` (a trailing slash is dropped). */
  url: string;
  /** This cluster's enrollment token. */
  token: string;
  /** The cluster's uid or name; must name the cluster the token belongs to. */
  clusterId: string;
  /** Sent in `hello` and the User-Agent: surrounding whitespace is dropped; then 1–128 printable ASCII characters. */
  operatorVersion: string;
  cursorStore: CursorStore;
  /** The outbound replay buffer. Default: in memory (a crash then costs a fresh session). */
  outboundLog?: OutboundLog;
  handlers: OperatorHandlers;
  /**
   * The complete observed state, for resync. Called once per resync, never twice at once; one
   * that throws is called again (1 s doubling to 30 s while the link stays up, else after the
   * next welcome).
   */
  snapshot: () => ObservedSnapshot | Promise<ObservedSnapshot>;
  logger?: Logger;
  timers?: Timers;
  /** Uniform in [0, 1): the backoff's jitter. */
  random?: () => number;
  /** How to open the WebSocket. Default: the `ws` package. */
  dial?: Dialer;
  pingIntervalMs?: number;
  idleTimeoutMs?: number;
  /** No `welcome` this long after `hello`: close (4408) and back off. Default 10 s (the spec). */
  handshakeTimeoutMs?: number;
  /**
   * Sequenced frames sent and not acknowledged, with the hub's ack not moving for this long
   * while the link stays up: close (4408) and resume, so the replay re-sends them (a frame lost
   * on a link that stayed up reaches the hub no other way). Default twice the idle limit (60 s at
   * the spec's 30 s), well past the hub's own limit for a frame it holds and cannot apply (it
   * closes 1013 then).
   */
  ackTimeoutMs?: number;
  backoff?: Partial<BackoffPolicy>;
  /** A session up this long resets the backoff. Default 10 s. */
  stableAfterMs?: number;
  /** Wait this long for another frame to carry a new cursor before sending an `ack`. Default 50 ms. */
  ackDelayMs?: number;
  /** At most one `link.stats` per this interval. Default 5 s. */
  statsIntervalMs?: number;
  /**
   * After the send queue evicted a state frame (backpressure), stream a fresh observed snapshot
   * this long afterwards, so the hub observes the lost statement again. At most one per
   * interval. Default 1 s.
   */
  reobserveDelayMs?: number;
  /** How long a graceful stop waits for acks and running operations. Default 10 s. */
  drainTimeoutMs?: number;
  /** Send queue capacity in frames. Default 4096. */
  sendQueueCapacity?: number;
  /**
   * Most control frames (error replies, operation reports) waiting to be written. At the bound
   * no hub frame is applied (its ack is withheld, so the hub's window stops it sending) and
   * operation progress is dropped. Default: `sendQueueCapacity`, at least 64.
   */
  controlQueueLimit?: number;
  /**
   * A hub frame whose handling (your `desired`, `pruneDesired` or `admitOperation` handler) has
   * not returned after this long is reported: an error line and the `stalled` event, again each
   * time the wait doubles (at most every 5 min), and a line when it returns. Frames are applied in
   * order, so none behind it is applied meanwhile. Default 30 s. A save of the durable state
   * (`cursorStore.save`), its load at start (`cursorStore.load`) or a sync of the outbound log
   * not completed after this long is reported the same way, with the `saveStalled` event.
   */
  handlerStallMs?: number;
  /** Retry delays for a frame whose handler failed transiently. Default 500 ms → 30 s. */
  retry?: Partial<BackoffPolicy>;
  operations?: OperationBookOptions;
}

/**
 * The timing and size options as the constructor checks them. Each ends up in a timer or a bound,
 * where a value no schedule can mean is no clear failure: a NaN or 0 ping interval pings on every
 * turn of the event loop (setTimeout reads NaN as 1 ms), a NaN idle limit re-arms its check every
 * millisecond and never closes a dead link, a NaN capacity makes every push an eviction.
 */
const POSITIVE_MS = ['pingIntervalMs', 'idleTimeoutMs', 'handshakeTimeoutMs', 'ackTimeoutMs', 'statsIntervalMs', 'handlerStallMs'] as const;
const NON_NEGATIVE_MS = ['stableAfterMs', 'ackDelayMs', 'reobserveDelayMs', 'drainTimeoutMs'] as const;
const COUNTS = ['sendQueueCapacity', 'controlQueueLimit'] as const;

export function assertTuning(o: OperatorClientOptions): void {
  for (const k of POSITIVE_MS) {
    const v = o[k];
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new RangeError(`${k} must be a finite number of milliseconds above 0, got ${v}`);
  }
  for (const k of NON_NEGATIVE_MS) {
    const v = o[k];
    if (v !== undefined && !(Number.isFinite(v) && v >= 0)) throw new RangeError(`${k} must be a finite number of milliseconds, 0 or more, got ${v}`);
  }
  for (const k of COUNTS) {
    const v = o[k];
    if (v !== undefined && !(Number.isSafeInteger(v) && v > 0)) throw new RangeError(`${k} must be a whole number above 0, got ${v}`);
  }
}

/** `OperatorClient.session`: the session in force (null before the first welcome of a new operator). */
export interface SessionView {
  sessionId: string | null;
  /** The contiguous cursor of the hub's stream. */
  cursor: number;
  /** The cursor in the last completed save of the record: the one sent as `ack`. */
  durableCursor: number;
  outbound: OutboundState | null;
  lossy: boolean;
  limits: Limits;
  nextReconnectInMs: number | null;
}

export type ClientState = 'idle' | 'connecting' | 'handshaking' | 'open' | 'waiting' | 'stopping' | 'stopped';

export interface ClientEvents {
  state: [ClientState];
  /**
   * A session opened. `fresh`: numbering restarted and a resync follows. `region`: the hub's
   * region, null if it names none. `limits`: the ones in force (a limit of the welcome out of the
   * SDK's bounds is replaced by the spec's value or the SDK's default: handshake.ts `boundedLimits`).
   */
  welcome: [{ sessionId: string; fresh: boolean; hubVersion: string; limits: Limits; region: string | null }];
  /** The link closed. `error`: the connection-level error the hub sent before closing, if any. */
  closed: [{ code: number; reason: string; httpStatus: number | null; welcomed: boolean; error: RefusalError | null }];
  /**
   * The hub refused this operator (refusal.ts): not an enrollment token (HTTP 401/403), not
   * registered, disabled or token rotated (4403), displaced by another operator (4409), or a
   * handshake it explained with an error (another major, the wrong cluster id, registry down).
   * `retryInMs`: when the next attempt is (a draw under the whole backoff cap unless the error was
   * retryable; never past the cap), or null when the refusal came while `stop()` was under way
   * (there is no next attempt; the stop still resolves).
   */
  refused: [RefusedEvent];
  hubError: [{ payload: Payload<'error'>; replyTo: string | null; seq: number | null }];
  /**
   * A hub frame's handler has not returned after `handlerStallMs` (and again as the wait
   * doubles): no later hub frame is applied until it does. Alert on it, or restart the process.
   */
  stalled: [{ seq: number; type: string; id: string; heldMs: number }];
  /**
   * A write to local storage has not completed after `handlerStallMs` (and again as the wait
   * doubles): a hung volume. `what: 'record'`, a save of the durable state (`cursorStore.save`):
   * saves are one at a time, so no ack is sent and no operation starts until it completes;
   * `'outbound-log'`, a sync of the outbound log: nothing is sent to the hub until it completes.
   * The hub stops sending once its window is full. Alert on it, or restart the process.
   */
  saveStalled: [{ what: HeldStorage; heldMs: number }];
  /** Local desired deployments were pruned against a complete hub snapshot. */
  pruned: [{ keep: ReadonlySet<string> }];
  stopped: [];
}

export interface RefusedEvent {
  kind: RefusalKind;
  closeCode: number;
  /** The same as `closeCode` (the field's first name). */
  code: number;
  httpStatus: number | null;
  error: RefusalError | null;
  reason: string;
  /** Null: refused while stopping, no next attempt. */
  retryInMs: number | null;
}

export interface ClientStats extends DispatchCounters {
  epoch: string;
  queue: OperatorQueueCounters;
  queued: number;
  unacked: number;
  framesIn: number;
  framesOut: number;
  duplicates: number;
  gaps: number;
  transientFailures: number;
  oversizeFrames: number;
  connects: number;
  sessionsOpened: number;
  freshSessions: number;
  resyncsSent: number;
  /** `operation.progress` reports dropped for want of room in the send queue (reported in `link.stats`). */
  droppedProgress: number;
}

/** Until a welcome says otherwise. */
export const DEFAULT_LIMITS: Limits = {
  ping_interval_s: 10,
  idle_timeout_s: 30,
  max_frame_bytes: 1024 * 1024,
  replay_buffer_frames: 10_000,
  replay_buffer_bytes: 64 * 1024 * 1024,
};

export function zeroStats(epoch: string): ClientStats {
  return {
    epoch,
    queue: { droppedEvents: 0, evictedFrames: 0, replacedFrames: 0 },
    queued: 0,
    unacked: 0,
    framesIn: 0,
    framesOut: 0,
    duplicates: 0,
    gaps: 0,
    transientFailures: 0,
    oversizeFrames: 0,
    connects: 0,
    sessionsOpened: 0,
    freshSessions: 0,
    resyncsSent: 0,
    unknownTypes: 0,
    poisonFrames: 0,
    permanentFailures: 0,
    hubErrors: 0,
    supersededDesired: 0,
    handlerFailures: 0,
    droppedProgress: 0,
  };
}
