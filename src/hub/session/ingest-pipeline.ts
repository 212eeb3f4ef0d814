import { applyIngestBatch, type IngestResult, type SessionFence } from '../db/ingest';
import { classifyDbError, describeError, failureKind, isIsolatable, NOT_AN_OUTAGE } from '../db/errors';
import type { Sql } from '../db/sql';
import { outcomeUnknown } from '../pg-errors';
import type { HubConfig } from '../config';
import type { Logger } from '../log';
import { LogBudget } from '../log-budget';
import { buildBatch, plainerRecord, writesNothing, type BuiltBatch, type InboundItem, type SentDesiredLookup } from './ingest-batch';
import { cutBeforeUncertainEnd, markRejectedMembers, openStream } from './ingest-streams';
import { DEFAULT_SCHEDULE_LIMITS, IngestSchedule, type FailureKind, type ScheduleLimits } from './ingest-schedule';
import type { OpResync } from './store';

type Outcome = { result: IngestResult } | { error: unknown };

/** A statement sent: its frames, what was built from them, and its outcome to come. */
interface Sent {
  chunk: InboundItem[];
  built: BuiltBatch;
  outcome: Promise<Outcome>;
}

/**
 * How much a session holds before it tells the operator to come back (1013) and replay: frames
 * not yet acknowledged (waiting to be applied, or applied past one that waits: a hole holds the
 * ack of everything behind it), and bytes of frames not yet applied (those applied are no longer
 * held). An operator that keeps to the replay window its welcome names never has more than that
 * window unacknowledged, and acks follow commits: so never less than the window, in frames or in
 * bytes (plus one frame: the window holds one frame larger than itself).
 */
export function unappliedBounds(cfg: Pick<HubConfig, 'INGEST_BATCH_FRAMES' | 'REPLAY_BUFFER_FRAMES' | 'REPLAY_BUFFER_BYTES' | 'MAX_FRAME_BYTES'>): { frames: number; bytes: number } {
  return {
    frames: Math.max(cfg.INGEST_BATCH_FRAMES * 50, cfg.REPLAY_BUFFER_FRAMES),
    bytes: cfg.REPLAY_BUFFER_BYTES + cfg.MAX_FRAME_BYTES,
  };
}

export interface IngestHost {
  sql: Sql;
  fence(): SessionFence | null;
  resyncs(): Record<string, OpResync>;
  /** Resolves an operator error's reply_to to the deployment.desired it answers. */
  sentDesired: SentDesiredLookup;
  /** The batch is committed in Postgres: settle its frames, persist the cursor, send the ack. */
  committed(items: InboundItem[], built: BuiltBatch, result: IngestResult): void;
  /**
   * `committed` threw (its record not stored: a full disk, a value over the limit): the frames are
   * in Postgres but settled nowhere, and out of the schedule, where no hole timer sees them.
   */
  commitFailed(err: unknown): void;
  /** The statement found the session no longer owns the cluster: nothing was written. */
  fenceLost(): void;
  /**
   * The statement found less of this session's stream in the database than the session knows it
   * committed: the database went back (restored from a backup). Nothing was written.
   */
  wentBack(): void;
  /** Whether retrying still helps: with no connection the peer will replay after its resume anyway. */
  keepRetrying(): boolean;
  /**
   * A statement was given up on unanswered (its deadline passed, or its connection ended under
   * it), so it may still commit, later than anything sent after it. Nothing more is applied until
   * the next hello: its claim moves the fence's generation, and the abandoned statement, fenced by
   * the old one, then writes nothing (or commits first: the claim waits for its fence's lock).
   */
  outcomeUnknown(err: unknown): void;
  log: Logger;
  /**
   * For the lines an operator can provoke once per frame (a frame the database refuses): the
   * session's, shared with its other such lines. The pipeline keeps one of its own without it.
   */
  logBudget?: LogBudget;
}

/**
 * Applies accepted frames in batches: whatever arrived while the previous batch was in flight
 * forms the next one, so one round trip carries many frames. Ack means applied: nothing is
 * settled until its batch commits. Which frames a statement carries is the schedule's decision
 * (ingest-schedule.ts); this class runs statements and sleeps. In the steady state a second
 * statement is queued behind the first on the same connection (the driver sends it as soon as the
 * first's answer arrives, so Postgres waits one hop, not for this object to settle and build);
 * statements are settled in the order they were sent, and when the first commits the second
 * becomes the first and another is queued behind it.
 *
 * - A transient failure one frame can cause (lock, statement timeout, serialization): the batch
 *   is split until that frame is alone; its subject is held and retried with backoff while every
 *   other frame goes on being applied. The cursor stays behind it; the session closes the
 *   connection when it has waited too long, so the peer replays from the cursor.
 * - Any other transient failure (the database unreachable): the same frames again after a backoff.
 * - Permanent failure (the data itself, SQLSTATE class 21/22/23/54): the batch is split until the
 *   frame the database refuses is alone; that one becomes a recorded rejection. A rejection the
 *   database refuses in turn is recorded more plainly (ASCII only, then not at all), so every
 *   permanent refusal changes what is queued: none can loop on the same item.
 */
export class IngestPipeline {
  private readonly schedule: IngestSchedule;
  private running: Promise<void> | null = null;
  private stopping = false;
  /** A statement's outcome is unknown: nothing runs until `quiesce` (the next hello). */
  private halted = false;
  private wake: (() => void) | null = null;
  /** The loop sleeps until its oldest frame has lingered (`lingerUntil`). */
  private lingering = false;
  /** Consecutive failed statements, for the live view. */
  transientFailures = 0;
  private readonly budget: LogBudget;
  /** Batch statements sent and not yet answered (two in the steady state: see `run`). */
  private inFlight = 0;

  constructor(
    private readonly host: IngestHost,
    private readonly maxBatch: number,
    limits: Partial<ScheduleLimits> = {},
    /**
     * With nothing in flight and fewer than a full batch waiting, a statement waits until its
     * oldest frame is this old (INGEST_LINGER_MS; 0: at once). A statement costs the session
     * about the same however few frames it carries, so an operator that reports steadily below
     * saturation (every frame its own statement) paid that cost per frame.
     */
    private readonly lingerMs = 0,
  ) {
    this.schedule = new IngestSchedule({ ...DEFAULT_SCHEDULE_LIMITS, ...limits, maxBatch });
    this.budget = host.logBudget ?? new LogBudget();
  }

  get size(): number {
    return this.schedule.size;
  }

  /** Frame bytes waiting to be applied. */
  get bytes(): number {
    return this.schedule.bytes;
  }

  /** Subjects whose frames are set aside after a transient failure. */
  get heldSubjects(): number {
    return this.schedule.heldSubjects;
  }

  /** Batch statements sent to the database and not yet answered, for the live view. */
  get statementsInFlight(): number {
    return this.inFlight;
  }

  /** When the oldest unapplied frame arrived, or null when everything is applied. */
  oldestArrival(): number | null {
    return this.schedule.oldestArrival();
  }

  push(item: InboundItem): void {
    this.schedule.push(item);
    this.kick();
  }

  kick(): void {
    if (this.stopping || this.halted) return;
    // A lingering statement wakes only for a full batch: woken per frame, it re-armed its timer
    // per frame, for the same deadline.
    if (this.lingering && this.schedule.size < this.maxBatch) return;
    if (this.running) {
      // A frame for a subject nobody waits on may be runnable at once.
      this.wake?.();
      return;
    }
    this.running = this.run();
  }

  /**
   * Stop after the statement in flight and forget everything unapplied (the peer replays it
   * after the resume). Resolves once nothing can settle any more.
   */
  async quiesce(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    try {
      await this.running;
    } finally {
      this.schedule.clear();
      this.stopping = false;
      this.halted = false;
      this.transientFailures = 0;
    }
  }

  private async run(): Promise<void> {
    try {
      // Let frames that arrive in the same tick join the first batch.
      await Promise.resolve();
      // The statement whose outcome is settled next; already in flight when it was sent behind
      // one that has since committed.
      let ahead: Sent | null = null;
      for (;;) {
        if (!ahead) {
          if (this.stopping) return;
          const lingered = this.lingerUntil();
          if (lingered !== null) {
            // Woken early by the frame that fills a batch (`kick`), and by a stop.
            this.lingering = true;
            try {
              await this.sleep(lingered - Date.now());
            } finally {
              this.lingering = false;
            }
            continue;
          }
          const plan = this.schedule.next(Date.now());
          if ('idle' in plan) return;
          if ('waitUntil' in plan) {
            await this.sleep(plan.waitUntil - Date.now());
            continue;
          }
          const fence = this.host.fence();
          if (!fence) return;
          // A stream.end waits for the commit of an operation frame its stream carried (it may be a rejection).
          const cut = cutBeforeUncertainEnd(plan.run);
          let run = cut === null ? plan.run : this.schedule.trimLast(cut);
          let built = buildBatch(run, this.host.resyncs(), this.host.sentDesired);
          // A frame the database may refuse, hidden by a later one: the batch ends before that
          // one, so the statement carries the frame and a refusal isolates and records it.
          for (let at = hiddenCut(run, built); at !== null; at = hiddenCut(run, built)) {
            run = this.schedule.trimLast(at);
            built = buildBatch(run, this.host.resyncs(), this.host.sentDesired);
          }
          ahead = { chunk: run, built, outcome: this.apply(fence, built) };
        }
        // The next statement is queued now, so the database runs it straight after this one
        // instead of idling while this object settles the first and builds the second.
        const behind = this.sendBehind(ahead);
        const first = this.settle(ahead.chunk, ahead.built, await ahead.outcome, () => this.schedule.succeeded(), (kind, now) => this.schedule.failed(kind, now), true);
        if (!behind) {
          ahead = null;
          if (first === 'stop') return;
          if (first === 'committed') await this.letAckOut();
          continue;
        }
        if (first === 'committed' && !this.stopping) {
          // The one behind becomes the one ahead while it runs, and the next goes out behind
          // it: the database always has the next statement queued, never a gap between batches.
          this.schedule.promoteBehind();
          ahead = behind;
          await this.letAckOut();
          continue;
        }
        const outcome = await behind.outcome;
        ahead = null;
        if (first === 'stop') return;
        const committed = first === 'committed';
        const second = this.settle(
          behind.chunk,
          behind.built,
          outcome,
          () => this.schedule.behindSucceeded(),
          (kind, now) => this.schedule.behindFailed(kind, now, committed),
          committed,
        );
        if (second === 'stop') return;
        if (second === 'committed') await this.letAckOut();
      }
    } finally {
      // Cleared in the same turn as the last look at the schedule: a `.finally()` on the promise
      // would clear it a microtask later, and a frame pushed in between would wait for the next push.
      this.running = null;
    }
  }

  /** Until when the next statement lingers for more frames, or null to build it now. */
  private lingerUntil(): number | null {
    if (this.lingerMs <= 0 || this.schedule.size >= this.maxBatch) return null;
    const oldest = this.schedule.oldestArrival();
    if (oldest === null) return null;
    const until = oldest + this.lingerMs;
    return until > Date.now() ? until : null;
  }

  /**
   * Ends the turn after a commit was settled, before the next statement is built. The settle
   * wrote the cursor and sent the ack, and the ack leaves only once this turn's write has been
   * committed, after the turn: building 2,000 frames' statement first held it (and so the
   * operator's next frames, which wait for it) for the build's duration, while the database,
   * already running the statement behind, needed nothing from this object.
   */
  private letAckOut(): Promise<void> {
    if (this.schedule.size === 0) return Promise.resolve();
    return new Promise((resolve) => setTimeout(resolve, 0));
  }

  /**
   * A second statement behind `ahead`, when the schedule offers one. Neither carries a member of
   * an open operator resync stream: the second's counts would assume the first applied. A stream
   * no frame names costs nothing: one a crashed process left open stays open (the hub cannot tell
   * it from one a reconnect will still end), and must not take pipelining away for good.
   */
  private sendBehind(ahead: Sent): Sent | null {
    if (this.stopping) return null;
    const fence = this.host.fence();
    if (!fence) return null;
    const open = ahead.built.resyncs;
    const member = Object.keys(open).length === 0 ? undefined : (item: InboundItem) => openStream(open, item.replyTo) !== undefined;
    let chunk = this.schedule.behind(Date.now(), member);
    if (!chunk) return null;
    let built = buildBatch(chunk, ahead.built.resyncs, this.host.sentDesired);
    // As for the statement ahead (see `run`).
    for (let at = hiddenCut(chunk, built); at !== null; at = hiddenCut(chunk, built)) {
      chunk = this.schedule.trimBehind(at);
      built = buildBatch(chunk, ahead.built.resyncs, this.host.sentDesired);
    }
    return { chunk, built, outcome: this.apply(fence, built) };
  }

  private apply(fence: SessionFence, built: BuiltBatch): Promise<Outcome> {
    this.inFlight++;
    return applyIngestBatch(this.host.sql, fence, built.batch).then(
      (result) => {
        this.inFlight--;
        return { result };
      },
      (error: unknown) => {
        this.inFlight--;
        return { error };
      },
    );
  }

  /**
   * One statement's outcome, in the order they were sent. `own`: a failure is this statement's
   * to report and act on (not so behind one that failed: that failure decides).
   */
  private settle(
    chunk: InboundItem[],
    built: BuiltBatch,
    outcome: Outcome,
    succeeded: () => void,
    failed: (kind: FailureKind, now: number) => InboundItem | null,
    own: boolean,
  ): 'committed' | 'failed' | 'stop' {
    if ('error' in outcome) {
      if (this.stopping) return 'stop';
      if (outcomeUnknown(outcome.error)) {
        // A retry, on a new connection, could commit before it and be overwritten by it.
        this.host.log.warn('ingest statement unanswered (past PG_QUERY_TIMEOUT_MS, or its connection lost under it); applying nothing more until the operator reconnects', {
          error: describeError(outcome.error),
          frames: this.schedule.size,
          first_seq: chunk[0]?.seq,
        });
        this.halted = true;
        this.schedule.clear();
        this.host.outcomeUnknown(outcome.error);
        return 'stop';
      }
      this.onFailure(chunk, outcome.error, failed, own);
      if (!this.host.keepRetrying()) {
        this.host.log.warn('ingest failed with no connection left; dropping unapplied frames for replay', {
          error: describeError(outcome.error),
          frames: this.schedule.size,
        });
        this.schedule.clear();
        return 'stop';
      }
      return 'failed';
    }
    const { result } = outcome;
    if (this.stopping && !result.fenced) return 'stop';
    if (result.wentBack) {
      this.schedule.clear();
      this.host.wentBack();
      return 'stop';
    }
    if (!result.fenced) {
      this.host.fenceLost();
      return 'stop';
    }
    succeeded();
    this.transientFailures = 0;
    markRejectedMembers(chunk, built, result.unknownOperations);
    try {
      this.host.committed(chunk, built, result);
    } catch (err) {
      // The peer replays them from the stored cursor: applying a committed frame again changes nothing.
      this.schedule.clear();
      this.host.commitFailed(err);
      return 'stop';
    }
    return 'committed';
  }

  private onFailure(chunk: InboundItem[], err: unknown, failed: (kind: FailureKind, now: number) => InboundItem | null, own: boolean): void {
    const kind = failureKindOf(chunk, err);
    const fields = { error: describeError(err), frames: chunk.length, first_seq: chunk[0]?.seq };
    const refused = failed(kind, Date.now());
    if (!own) return;
    if (kind === 'permanent') {
      if (!refused) {
        // A frame of data the database refuses is one the operator can send again and again.
        this.budget.write(this.host.log, { kind: 'db-refused-split', level: 'warn', msg: 'ingest batch refused by the database; splitting to find the frame', fields, seq: fields.first_seq ?? null, reason: fields.error });
        return;
      }
      this.recordRefused(refused, err);
      return;
    }
    this.transientFailures++;
    if (kind === 'global' && failureKind(err) === 'fault') {
      // Nothing is dropped for it (a replay succeeds once the schema or the code is mended), but
      // no retry mends it alone: said loudly.
      this.host.log.error(`ingest batch failed: ${NOT_AN_OUTAGE}; ack withheld, retried until it is mended`, {
        ...fields,
        held_subjects: this.schedule.heldSubjects,
      });
      return;
    }
    this.host.log.warn(
      kind === 'isolatable'
        ? 'ingest batch failed transiently; isolating the frame, ack withheld behind it, later frames still applied'
        : 'ingest batch failed; ack withheld, will retry',
      { ...fields, held_subjects: this.schedule.heldSubjects },
    );
  }

  /**
   * A frame the database refused alone, permanently: queued again as a rejection (same seq, same
   * place), accepted and acknowledged once that commits. A frame already being recorded as one
   * steps down to a plainer record instead, never the same item again.
   */
  private recordRefused(refused: InboundItem, err: unknown): void {
    const fields = { seq: refused.seq, type: refused.type, frame_id: refused.id, error: describeError(err) };
    if (refused.kind === 'message') {
      this.schedule.replace({
        seq: refused.seq,
        id: refused.id,
        replyTo: refused.replyTo,
        type: refused.type,
        arrivedAt: refused.arrivedAt,
        kind: 'poison',
        reason: `database refused the frame: ${describeError(err).slice(0, 500)}`,
      });
      this.budget.write(this.host.log, { kind: 'db-refused', level: 'error', msg: 'POISON FRAME: database refused it; recording rejection', fields, seq: refused.seq, reason: fields.error });
      return;
    }
    const plainer = plainerRecord(refused);
    this.schedule.replace(plainer);
    if (plainer.record === 'none') {
      // Not budgeted: nothing is recorded for this frame, so this line is its only trace.
      this.host.log.error('POISON FRAME: database refused even its ASCII rejection record; acknowledged and dropped UNRECORDED', fields);
      return;
    }
    this.budget.write(this.host.log, {
      kind: 'db-refused-record',
      level: 'error',
      msg: 'POISON FRAME: database refused its rejection record; recording it reduced to ASCII',
      fields,
      seq: refused.seq,
      reason: fields.error,
    });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(
        () => {
          this.wake = null;
          resolve();
        },
        Math.max(0, ms),
      );
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
    });
  }
}

/**
 * How many of `run`'s frames to keep so that its statement hides no row the database may refuse
 * (`BuiltBatch.hidesRefusable`), or null when it hides none. Never 0: what hides a frame comes
 * after it.
 */
function hiddenCut(run: readonly InboundItem[], built: BuiltBatch): number | null {
  if (built.hidesRefusable === null) return null;
  const at = run.findIndex((x) => x.seq === built.hidesRefusable);
  return at > 0 ? at : null;
}

/**
 * How a statement failed, for the schedule. A "permanent" refusal of a statement that writes
 * nothing of the operator's cannot be the frames' doing (unsure means transient): it is retried
 * as the database's failure, with backoff, rather than blamed on a frame with nowhere left to go.
 */
function failureKindOf(chunk: readonly InboundItem[], err: unknown): FailureKind {
  if (classifyDbError(err) === 'permanent') return chunk.every(writesNothing) ? 'global' : 'permanent';
  return isIsolatable(err) ? 'isolatable' : 'global';
}
