/**
 * The receive side: one text frame from the hub, from decoding to settlement. The envelope's
 * `ack` releases the replay buffer; `triage` (pure) says what the frame asks of the link; a
 * sequenced frame is checked against the arrival expectation (a duplicate is dropped, a gap
 * closes the link) and applied in order through `dispatch` (inbound-dispatch.ts). A frame that
 * fails transiently is retried with backoff while later frames are still applied; the
 * contiguous cursor stays behind it until it settles.
 */
import { answerableId, readFrame, timeMs, type Envelope, type InboundSequencer, type OutboundSequencer, type Payload } from '../protocol';
import type { BackoffPolicy } from './backoff';
import type { ClientStats } from './client-types';
import { triage, type ReadableFrame } from './frame-triage';
import { dispatch, type Dispatched, type DispatchHost, type Settled } from './inbound-dispatch';
import type { Link } from './link';
import type { Logger } from './logger';
import { elapsed, MAX_TIMEOUT_MS, type Timers } from './timers';

/** The delay before retry `attempt + 1` of a frame that failed transiently. */
export function retryDelay(policy: BackoffPolicy, attempt: number): number {
  return Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(attempt, 30));
}

export interface ReceiverHost {
  readonly timers: Timers;
  /** Names the cluster and the current session (rebuilt at each welcome). */
  readonly log: Logger;
  /**
   * Whether the send queue has room for the answer of the frame about to be applied on top of
   * `owed` answers of frames applied and not yet settled (operation starts waiting for a save).
   */
  roomForReplies(owed: number): boolean;
  readonly counters: ClientStats;
  readonly retryPolicy: BackoffPolicy;
  inbound(): InboundSequencer;
  outbound(): OutboundSequencer;
  /** The link frames are read from now (frames of any other are ignored). */
  link(): Link | null;
  dispatchHost(): DispatchHost;
  /** Close 4400 after an error frame; `replyTo` the offending frame's id when it is a ULID. */
  protocolError(link: Link, reason: string, replyTo?: string | null): void;
  welcome(link: Link, payload: Payload<'welcome'>): void;
  /** Tell the application about an `error` from the hub (the `hubError` event). */
  hubError(payload: Payload<'error'>, replyTo: string | null, seq: number | null): void;
  answerPing(link: Link): void;
  /** The hub acknowledged more of this side's stream. */
  acknowledged(peerAck: number): void;
  /** A hub snapshot opened or closed: part of the durable record. */
  snapshotChanged(): void;
  /** An application handler failed transiently (counted for link.stats). */
  handlerFailed(): void;
  /** Handling one frame this long without settling is reported as a stall (`stalled`). */
  readonly handlerStallMs: number;
  /** A frame's handling has held the stream this long (the `stalled` event). */
  stalled(info: StallInfo): void;
  cursorAdvanced(): void;
  /** A frame settled (a graceful stop may be drained). */
  settled(): void;
  /**
   * The client is stopping: frames not yet applied are left to the hub to replay to the next
   * process. Applied now, their consequences would outlive this process's reporting: an
   * operation run past the stop and never concluded, a change whose observation the stopped
   * informers never send.
   */
  stopping(): boolean;
}

/** A hub frame whose handling has not settled: no later frame is applied until it does. */
export interface StallInfo {
  seq: number;
  type: string;
  id: string;
  heldMs: number;
}

interface Applying {
  what: { seq: number; type: string; id: string };
  started: number;
  /** When the next report is due, if the frame is still being applied. */
  nextAt: number;
  reports: number;
}

/** A frame applied whose settlement waits (an operation start waiting for its save). */
interface Settling {
  settling: Promise<void>;
}

/** Reports of one stall come at the threshold and at each doubling after it, at most this far apart. */
const STALL_REPORT_CAP_MS = 5 * 60_000;

export class Receiver {
  /** Hub frames read and not yet settled. */
  pending = 0;
  private chain: Promise<void> = Promise.resolve();
  private readonly retries = new Set<() => void>();
  /** Deadline timers of operation starts waiting behind an earlier frame (cancelled at their turn). */
  private readonly queuedDeadlines = new Set<() => void>();
  /**
   * Starts whose apply failed (an admission deferred, a record that could not be saved, no room
   * for their answers), by operation id: their deadline is watched whatever becomes of the link.
   * The retry dies with the link, and a hub that opens a fresh session after the deadline does
   * not send an expired start again, so without this the operator would never answer it.
   */
  private readonly deferredStarts = new Map<string, () => void>();
  /** The frame being applied (one at a time), for the stall watch. */
  private applying: Applying | null = null;
  /** Cancels the stall watch's timer, armed while frames are being applied. */
  private stallTimer: (() => void) | null = null;
  /** When the armed stall timer fires. */
  private stallDueAt = 0;
  private disposed = false;
  /**
   * Operation starts recorded and waiting for their save, settled in seq order: a start behind
   * them is applied meanwhile and shares the next save (group commit), any other frame waits.
   */
  private recording: Promise<void> = Promise.resolve();
  /** How many starts `recording` holds: each owes an answer (`operation.accepted` or an error). */
  private recordingCount = 0;

  constructor(private readonly host: ReceiverHost) {}

  onMessage(link: Link, text: string, binary: boolean): void {
    const h = this.host;
    if (h.link() !== link || link.ended || link.closing) return;
    h.counters.framesIn++;
    link.heard();
    if (binary) return h.protocolError(link, 'binary message: every frame is a JSON text message');
    const frame = readFrame(text);
    if (frame.kind === 'fatal') {
      h.log.error('undecodable frame from the hub', { reason: frame.reason, id: frame.id });
      return h.protocolError(link, frame.reason, frame.id);
    }
    const env = frame.envelope;

    // The cursor rides on any readable envelope, sequenced or not.
    if (env.ack !== null && link.welcomed) {
      const outbound = h.outbound();
      const outcome = outbound.acknowledge(env.ack);
      if (outcome === 'invalid') return h.protocolError(link, `ack ${env.ack} is beyond the last frame sent (${outbound.lastSent})`, answerableId(env.id));
      if (outcome === 'advanced') {
        link.ackAdvanced(outbound.unacked === 0);
        h.acknowledged(env.ack);
      }
    }

    const t = triage(frame, link.welcomed);
    switch (t.do) {
      case 'close':
        return h.protocolError(link, t.reason, answerableId(env.id));
      case 'welcome':
        return h.welcome(link, t.payload);
      case 'connection-error':
        return this.connectionError(link, t.payload, env);
      case 'answer-ping':
        return h.answerPing(link);
      case 'ignore':
        if (t.warn) h.log.warn(t.warn, { type: env.type });
        return;
      case 'sequenced':
        return this.sequenced(link, frame, t.seq);
    }
  }

  /**
   * A connection-level error (`seq: null`): the hub explains why it is about to close this link
   * (a refusal, a protocol error, displacement). It belongs to no stream: not acknowledged, never
   * fatal by itself. The close that follows decides what happens (connection.ts, refusal.ts).
   */
  private connectionError(link: Link, payload: Payload<'error'>, env: Envelope): void {
    this.host.counters.hubErrors++;
    this.host.log.debug('connection-level error from the hub', { ...payload, reply_to: env.reply_to });
    this.host.hubError(payload, env.reply_to, null);
    link.connectionError = { code: payload.code, message: payload.message, retryable: payload.retryable };
  }

  /** The link closed: frames read on it are not applied any more, and their retries stop. */
  cancelRetries(): void {
    for (const cancel of this.retries) cancel();
    this.retries.clear();
  }

  /** The client stopped: no retry and no stall report outlives it (a timer would keep Node running). */
  dispose(): void {
    this.cancelRetries();
    for (const cancel of this.queuedDeadlines) cancel();
    this.queuedDeadlines.clear();
    this.deferredStarts.clear();
    this.disposed = true;
    this.stallTimer?.();
    this.stallTimer = null;
  }

  private sequenced(link: Link, frame: ReadableFrame, seq: number): void {
    const h = this.host;
    const inbound = h.inbound();
    const arrival = inbound.arrive(seq);
    if (arrival === 'duplicate') {
      h.counters.duplicates++;
      h.log.debug('duplicate frame dropped', { seq, type: frame.envelope.type, id: frame.envelope.id, expected: inbound.expected });
      return;
    }
    if (arrival === 'gap') {
      h.counters.gaps++;
      return h.protocolError(link, `gap: expected seq ${inbound.expected}, got ${seq}`, answerableId(frame.envelope.id));
    }
    this.enqueue(frame, () => this.apply(link, frame, 0));
  }

  /**
   * Frames are applied one at a time, so a handler that never returns holds every frame behind
   * it and the cursor with them: a cluster no longer managed, with nothing else to show it. The
   * SDK cannot run the handler again beside the one still running, so it does not time it out; it
   * says so, loudly and again as the wait doubles, and says when the handler returns. Per frame
   * this only notes what is being applied: one timer, armed while frames are applied, looks.
   */
  private watchStall(env: Envelope): () => void {
    const h = this.host;
    // A duration: on the monotonic clock, so a wall-clock step neither hides nor fakes a stall.
    const started = elapsed(h.timers);
    const entry: Applying = { what: { seq: env.seq as number, type: env.type, id: env.id }, started, nextAt: started + h.handlerStallMs, reports: 0 };
    this.applying = entry;
    // The timer may still be armed for the next report of a long stall just ended (up to
    // STALL_REPORT_CAP_MS away): this frame's first report is due sooner.
    if (this.stallTimer !== null && this.stallDueAt > entry.nextAt) {
      this.stallTimer();
      this.stallTimer = null;
    }
    if (this.stallTimer === null) this.armStall(h.handlerStallMs);
    return () => {
      if (this.applying === entry) this.applying = null;
      if (entry.reports > 0) h.log.warn('the held handler returned; the hub stream moves again', { ...entry.what, held_ms: elapsed(h.timers) - started });
    };
  }

  private armStall(inMs: number): void {
    if (this.disposed) return;
    this.stallDueAt = elapsed(this.host.timers) + inMs;
    this.stallTimer = this.host.timers.schedule(() => this.checkStall(), inMs);
  }

  private checkStall(): void {
    this.stallTimer = null;
    const a = this.applying;
    // Nothing being applied: the next frame arms the timer again.
    if (!a) return;
    const h = this.host;
    const now = elapsed(h.timers);
    if (now < a.nextAt) return this.armStall(a.nextAt - now);
    const heldMs = now - a.started;
    a.reports++;
    h.log.error('a handler has held the hub stream: no later frame is applied until it returns', { ...a.what, held_ms: heldMs });
    h.stalled({ ...a.what, heldMs });
    a.nextAt = now + Math.min(Math.max(heldMs, h.handlerStallMs), STALL_REPORT_CAP_MS);
    this.armStall(a.nextAt - now);
  }

  /** `task` applies the frame; when it returns `settling`, that settles it (the next frame may be applied before). */
  private enqueue(frame: ReadableFrame, task: () => Promise<Settling | undefined>): void {
    // Something ahead may hold the stream past a start's deadline: the deadline is watched while
    // it waits, not only once its handler would run.
    const unwatch = this.pending > 0 ? this.watchQueuedDeadline(frame) : null;
    this.pending++;
    const { seq, type, id } = frame.envelope;
    const failed = (err: unknown) => this.host.log.error('inbound processing failed', { err, seq, type, id });
    const done = () => {
      this.pending--;
      this.host.settled();
    };
    this.chain = this.chain
      .then(async () => {
        // Starts ahead wait for their save: only a start may be applied meanwhile (and share the
        // next save); anything else waits for them to settle, watched as if they held it.
        if (this.recordingCount > 0 && !this.sharesSave(frame)) await this.recording;
        unwatch?.();
        return task();
      })
      .then(
        (rest) => {
          if (rest) void rest.settling.catch(failed).finally(done);
          else done();
        },
        (err: unknown) => {
          failed(err);
          done();
        },
      );
  }

  /**
   * Whether `frame` may be applied while earlier starts wait for their save. Only a start: it
   * changes nothing but its own record before that save, and every frame's answer, ack and
   * effects still follow the starts before it. Not with an admission gate, which must see the
   * operations started before it running; not without room for every answer the starts owe.
   */
  private sharesSave(frame: ReadableFrame): boolean {
    return (
      frame.kind === 'message' &&
      frame.message.type === 'operation.start' &&
      this.host.dispatchHost().handlers.admitOperation === undefined &&
      this.host.roomForReplies(this.recordingCount)
    );
  }

  /** At the deadline of an `operation.start` still queued, answer it (operations.ts) without waiting for its turn. */
  private watchQueuedDeadline(frame: ReadableFrame, fired?: () => void): (() => void) | null {
    if (frame.kind !== 'message' || frame.message.type !== 'operation.start') return null;
    const payload = frame.message.payload;
    const deadline = timeMs(payload.deadline);
    if (!Number.isFinite(deadline)) return null;
    const h = this.host;
    let cancelTimer = () => {};
    const unwatch = () => {
      cancelTimer();
      this.queuedDeadlines.delete(unwatch);
    };
    const arm = () => {
      const left = deadline - h.timers.now();
      // setTimeout cannot wait longer; a timer that fired early would answer before the deadline.
      if (left > MAX_TIMEOUT_MS) {
        cancelTimer = h.timers.schedule(arm, MAX_TIMEOUT_MS);
        return;
      }
      cancelTimer = h.timers.schedule(() => {
        this.queuedDeadlines.delete(unwatch);
        fired?.();
        if (!h.stopping()) h.dispatchHost().book.deadlinePassedInQueue(payload, frame.envelope.id);
      }, left);
    };
    arm();
    this.queuedDeadlines.add(unwatch);
    return unwatch;
  }

  private async apply(link: Link, frame: ReadableFrame, attempt: number): Promise<Settling | undefined> {
    const h = this.host;
    // Frames read on a link that has since closed, or once the client is stopping, are not
    // applied: the hub replays them (to this process's successor). A start read here is still
    // owed an answer: a fresh next session does not bring it back once its deadline has passed.
    if (link.ended || h.stopping()) {
      if (!h.stopping()) this.watchUnsettledStart(frame);
      return undefined;
    }
    const unwatch = this.watchStall(frame.envelope);
    let result: Dispatched;
    try {
      result = await dispatch(h.dispatchHost(), frame, attempt);
    } catch (err) {
      result = this.internalFailure(frame, err);
    }
    if (result.settle !== 'recorded') {
      unwatch();
      this.settle(link, frame, attempt, result);
      return undefined;
    }
    // The start waits for its save; the stall watch and the stream stay on it until it settles.
    const { durable } = result;
    this.recordingCount++;
    const rest = this.recording
      .then(() => durable)
      .catch((err: unknown) => this.internalFailure(frame, err))
      .then((settled) => {
        this.recordingCount--;
        unwatch();
        this.settle(link, frame, attempt, settled);
      });
    this.recording = rest.catch(() => {});
    // Wrapped: an async function returning the promise itself would wait for it.
    return { settling: rest };
  }

  /**
   * A start read but not settled (deferred, or not applied because its link dropped) is answered
   * at its deadline unless it settles first: its retry, or its replay in a resumed session, would
   * answer it, but a retry dies with the link and a fresh session does not bring an expired start
   * back. (The answer goes out in whatever session is open then; operations.ts records it.)
   */
  private watchUnsettledStart(frame: ReadableFrame): void {
    const operationId = startedOperation(frame);
    if (operationId === null || this.deferredStarts.has(operationId)) return;
    const unwatch = this.watchQueuedDeadline(frame, () => this.deferredStarts.delete(operationId));
    if (!unwatch) return;
    this.deferredStarts.set(operationId, () => {
      unwatch();
      this.deferredStarts.delete(operationId);
    });
  }

  private internalFailure(frame: ReadableFrame, err: unknown): Settled {
    // A bug of ours: unsure means transient, so the frame is retried rather than lost.
    const { seq, type, id } = frame.envelope;
    this.host.log.error('applying a frame failed unexpectedly; treated as transient', { err, seq, type, id });
    return { settle: 'failed', reason: `internal error: ${err instanceof Error ? err.message : String(err)}`, cause: 'internal' };
  }

  private settle(link: Link, frame: ReadableFrame, attempt: number, result: Settled): void {
    const h = this.host;
    const seq = frame.envelope.seq as number;
    if (link.ended) {
      // A start that failed after its link dropped (a gate that answered `transient` late) is owed
      // its answer as one that failed before.
      if (result.settle === 'failed' && !h.stopping()) this.watchUnsettledStart(frame);
      return;
    }
    if (frame.envelope.type === 'resync.begin' || frame.envelope.type === 'stream.end') h.snapshotChanged();
    const operationId = startedOperation(frame);
    if (result.settle !== 'failed') {
      if (operationId !== null) this.deferredStarts.get(operationId)?.();
      if (h.inbound().settle(seq, result.settle)) h.cursorAdvanced();
      return;
    }
    this.watchUnsettledStart(frame);
    h.inbound().settle(seq, 'failed');
    h.counters.transientFailures++;
    if (result.cause === 'handler') h.handlerFailed();
    // An operation the gate keeps deferring is retried at its deadline at the latest, so the
    // deadline's error goes out then, not up to a backoff cap later.
    const backoff = retryDelay(h.retryPolicy, attempt);
    const delay = result.retryBy === undefined ? backoff : Math.max(0, Math.min(backoff, result.retryBy - h.timers.now()));
    h.log.warn('frame not applied (transient): ack withheld, retrying', {
      seq,
      type: frame.envelope.type,
      id: frame.envelope.id,
      reason: result.reason,
      cause: result.cause,
      attempt: attempt + 1,
      retry_in_ms: delay,
    });
    const cancel = h.timers.schedule(() => {
      this.retries.delete(cancel);
      this.enqueue(frame, () => this.apply(link, frame, attempt + 1));
    }, delay);
    this.retries.add(cancel);
  }
}

/** The operation an `operation.start` frame starts, or null for any other frame. */
function startedOperation(frame: ReadableFrame): string | null {
  return frame.kind === 'message' && frame.message.type === 'operation.start' ? frame.message.payload.operation_id : null;
}
