/**
 * The session this operator is in: its id, both sequencers, the hub's limits, the hub snapshot
 * streams open in it, and what the durable record says about it. A link comes and goes; the
 * session continues on the next one, or is replaced by a fresh one (numbering restarts at 1 both
 * ways, both replay buffers dropped), or, after a displacement, forgotten.
 */
import { coalescingKey, InboundSequencer, OutboundSequencer, queueClassOf, type OutboundState, type Payload, type ReplayEntry, type TypedMessage } from '../protocol';
import { AppliedRevisions } from './applied-revisions';
import { DEFAULT_LIMITS, type Limits } from './client-types';
import type { DurableRecord, OperationRecord } from './cursor-store';
import type { Logger } from './logger';
import type { OutboundLog } from './outbound-log';
import { InboundResyncs } from './resync';
import { decideResumeBase } from './resume-base';

/** What a resumed welcome lets this session replay, or why it cannot resume. */
export type SessionResume = { ok: true; replay: ReplayEntry[] } | { ok: false; reason: string };

/** The sequencer's own overflow bound is not what limits the window; the hub's limits are. */
const UNBOUNDED = { frames: Number.MAX_SAFE_INTEGER, bytes: Number.MAX_SAFE_INTEGER };

export class SessionState {
  /** The session to resume (null: the next hello asks for a new one). */
  id: string | null = null;
  /** The session this operator was displaced from (kept for diagnostics, never resumed). */
  displaced: string | null = null;
  /** This operator cannot serve as a resume base: the next hello says so. */
  lossy = false;
  /**
   * The last process stopped inside a hub snapshot. Kept in the record until a fresh session
   * supersedes it: a process that never reaches the hub must not erase the note with its first
   * save, or the one after it would resume a session whose snapshot nobody can prune against.
   */
  private snapshotInterrupted = false;
  limits: Limits = DEFAULT_LIMITS;
  /** Bumped on every fresh session: work started under an older session is abandoned. */
  gen = 0;
  inbound = new InboundSequencer(0);
  outbound: OutboundSequencer;
  /** The hub's snapshot streams open in this session. */
  readonly streams = new InboundResyncs();
  /** Highest `deployment.desired.revision` applied per deployment in this session. */
  readonly appliedRevision = new AppliedRevisions(() => this.ackableCursor());
  /**
   * The answers (error frames) to hub frames that are queued or numbered but not yet in the synced
   * outbound log, each with the seq of the frame it answers. Only the log survives the process: a
   * cursor saved past such a frame (the hello's resume_from, an ack) would tell the hub it need
   * never send it again, and the answer would be lost with the process.
   */
  private readonly unwrittenAnswers = new Map<object, number>();

  constructor(private readonly buffer: OutboundLog) {
    this.outbound = new OutboundSequencer(buffer, UNBOUNDED);
  }

  /**
   * Take up what the durable record and the outbound log say (resume-base.ts). Returns whether an
   * observed snapshot is owed once the session opens (after any unclean stop).
   */
  restore(record: DurableRecord, log: Logger): { resyncAfterOpen: boolean } {
    this.id = record.sessionId;
    this.displaced = record.displacedSession ?? null;
    this.inbound = new InboundSequencer(record.cursor);
    this.appliedRevision.restore(record.appliedPastCursor ?? []);
    const base = decideResumeBase(record, this.buffer);
    if (base.keepBuffer) {
      this.buffer.releaseThrough(base.outbound.peerAck);
      if (base.lossy && !base.snapshotInterrupted) log.warn('the session cannot be resumed: hello will say lossy; its outbound log is kept to count what the fresh session loses', { problem: base.problem });
      else if (base.problem) log.warn('outbound log recovered', { problem: base.problem });
    } else {
      if (base.lossy && !base.snapshotInterrupted) {
        log.warn('cannot prove the outbound buffer survived: hello will say lossy', { problem: base.problem });
      }
      this.buffer.clear();
    }
    this.snapshotInterrupted = base.snapshotInterrupted;
    if (base.snapshotInterrupted) {
      const session = record.sessionId;
      log.warn('restarted in the middle of a hub snapshot: hello will say lossy so a fresh snapshot follows', { session });
    }
    this.lossy = base.lossy;
    this.outbound = new OutboundSequencer(this.buffer, UNBOUNDED, base.outbound);
    return { resyncAfterOpen: base.resyncAfterOpen };
  }

  /** The durable record of this session as of now. */
  record(clean: boolean, operations: OperationRecord[]): DurableRecord {
    return {
      version: 1,
      sessionId: this.id,
      cursor: this.ackableCursor(),
      outbound: this.outbound.snapshot(),
      clean,
      operations,
      hubSnapshotOpen: this.streams.prunesOpen() || this.snapshotInterrupted,
      displacedSession: this.displaced,
      lossy: this.lossy,
      appliedPastCursor: this.appliedRevision.pastCursor(this.ackableCursor()),
    };
  }

  /**
   * The cursor this side may make durable and send as `ack`: the contiguous cursor, held below the
   * first hub frame whose answer is not yet in the synced outbound log. Frames past it that were
   * applied are replayed after a restart and dropped or applied again (at-least-once); the one
   * whose answer died with the process is answered again.
   */
  ackableCursor(): number {
    let cursor = this.inbound.cursor;
    for (const seq of this.unwrittenAnswers.values()) if (seq <= cursor) cursor = seq - 1;
    return cursor;
  }

  /** `answer` (queued) answers the hub frame `seq`: the durable cursor stays below it until… */
  oweAnswer(answer: object, seq: number): void {
    this.unwrittenAnswers.set(answer, seq);
  }

  /** …it is in the synced log, or will never be sent (too large for the hub). */
  answerSettled(answer: object): void {
    this.unwrittenAnswers.delete(answer);
  }

  /**
   * The hub granted a fresh session: everything numbered under the old one is dropped. Returns how
   * many unacked frames were, and the removals among them, to be sent again under the new one.
   */
  fresh(sessionId: string): { dropped: number; droppedEvents: number; removals: Removal[] } {
    const dropped = this.outbound.unacked;
    // Events are history, not state: the resync that supersedes the old numbering does not carry
    // them, so those the hub never acknowledged are lost, and counted like any dropped event.
    // A removal is state the snapshot carries only by leaving the subject out, which removes it
    // at the hub only when the snapshot ends complete: one member the catalog refuses and the
    // hub would keep the subject for good. So it is queued again; it follows the snapshot unless
    // the snapshot lists the subject (back since: Outbox.startResync drops the removal then).
    let droppedEvents = 0;
    // The last word per subject: a removal followed by a newer report of its subject is not one.
    const last = new Map<string, { type: string; payload: unknown }>();
    for (const e of this.buffer.entriesAfter(this.outbound.peerAck)) {
      const kind = frameKind(e.frame);
      if (kind === null) continue;
      if (kind.type.endsWith('.event')) droppedEvents++;
      else if (isStateFrame(kind.type)) {
        const key = coalescingKey(kind as TypedMessage);
        if (key !== null) {
          last.delete(key);
          last.set(key, kind);
        }
      }
    }
    const removals = [...last.values()].filter((k): k is Removal => isRemoval(k.type));
    this.gen++;
    this.outbound.reset();
    this.buffer.bindSession(sessionId);
    this.inbound.reset();
    this.streams.clear();
    this.appliedRevision.clear();
    // The frames they answer belong to the old numbering: the resync supersedes them.
    this.unwrittenAnswers.clear();
    this.id = sessionId;
    this.lossy = false;
    this.snapshotInterrupted = false;
    return { dropped, droppedEvents, removals };
  }

  /**
   * The hub resumed this session from its cursor `ackSeq` of ours, accepting frames of at most
   * `maxFrameBytes`: what to replay, or why not (then the session is lossy: the next hello asks
   * for a fresh one).
   */
  resume(ackSeq: number, maxFrameBytes = this.limits.max_frame_bytes): SessionResume {
    const plan = this.outbound.planResume(ackSeq);
    if (!plan.ok) {
      this.lossy = true;
      return plan;
    }
    // Frames numbered under an earlier welcome's larger limit: a replay is verbatim (same id, seq
    // and text), so one the hub now refuses (1009) can never be delivered, and skipping it would
    // leave a gap. Every resume would end the same way; only a fresh session gets past it.
    const over = plan.replay.filter((e) => e.bytes > maxFrameBytes);
    const first = over[0];
    if (first) {
      this.lossy = true;
      const largest = over.reduce((m, e) => Math.max(m, e.bytes), 0);
      return {
        ok: false,
        reason: `${over.length} unacknowledged frame(s) from seq ${first.seq} exceed max_frame_bytes ${maxFrameBytes} (largest ${largest} B): a replay cannot carry them`,
      };
    }
    // The hub is about to replay from our cursor + 1: expect exactly that.
    this.inbound.rewind();
    return plan;
  }

  /** Displaced (4409): never resume this session; the next hello asks for a new one. */
  forget(): void {
    if (this.id === null) return;
    this.displaced = this.id;
    this.id = null;
    this.lossy = false;
  }

  view(): { sessionId: string | null; cursor: number; outbound: OutboundState; lossy: boolean; limits: Limits } {
    const { id: sessionId, lossy } = this;
    return { sessionId, cursor: this.inbound.cursor, outbound: this.outbound.snapshot(), lossy, limits: { ...this.limits } };
  }
}

/** Whether a frame as sent is of an event type (`*.event`). */
/** A `*.removed` frame numbered under a session the hub replaced. */
export type Removal =
  | { type: 'node.removed'; payload: Payload<'node.removed'> }
  | { type: 'device.removed'; payload: Payload<'device.removed'> }
  | { type: 'deployment.removed'; payload: Payload<'deployment.removed'> };

const REMOVALS = new Set(['node.removed', 'device.removed', 'deployment.removed']);
const isRemoval = (type: string): boolean => REMOVALS.has(type);
const isStateFrame = (type: string): boolean => queueClassOf(type) === 'state';

/** A frame of our own log, as written (it passed the catalog then). */
function frameKind(frame: string): { type: string; payload: unknown } | null {
  try {
    const f = JSON.parse(frame) as { type?: unknown; payload?: unknown };
    return typeof f.type === 'string' ? { type: f.type, payload: f.payload } : null;
  } catch {
    return null;
  }
}
