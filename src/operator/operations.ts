/**
 * Operations: imperative, long-running, able to fail, and outside the resync contract.
 *
 * Accepted once: every `operation.start` is deduplicated by `operation_id` against the records
 * kept in the durable record (so a restart does not re-run a concluded one). A redelivery of a
 * running operation is dropped; a redelivery of a concluded one re-sends its conclusion, because
 * the hub may have lost it, unless the conclusion is still on its way in this session (queued, or
 * in the replay buffer, which a resume replays): the hub keeps only the first result and files
 * every later one in the operation's history, so a second one would read as a second run. The
 * conclusion is an `operation.result`, or an `error` replying to the start when the operation was
 * refused or its deadline passed (the hub reads that as failed).
 *
 * An operation still running when the process died cannot be resumed by this process: at start
 * it is concluded as `failed` with a message saying so, rather than being silently re-run.
 * Conclusions are re-sent until the hub acknowledges the frame carrying them (a fresh session
 * drops the replay buffer they were in).
 *
 * This book decides (deduplication, the admission gate, deadlines, what a redelivery is owed);
 * operation-runner.ts runs the handler and operation-conclusions.ts gets each conclusion to the hub.
 */
import { timeMs, type Payload, type ReplayEntry } from '../protocol';
import type { OperationRecord, StoredConclusion } from './cursor-store';
import { runHandler, type FrameContext, type OperatorHandlers } from './handlers';
import type { Logger } from './logger';
import { ConclusionDelivery, conclusionsIn } from './operation-conclusions';
import { cutMessage, OperationRunner } from './operation-runner';
import { outItem, type OutItem } from './outgoing';
import { scheduleAt, type Timers } from './timers';

export interface OperationHost {
  /** Queue a frame for the hub. */
  send(item: OutItem): void;
  /**
   * Whether a report may be queued now: the send queue holds a bounded number of control frames
   * and keeps a few for the answers to hub frames. Without room, progress is dropped (counted)
   * and a conclusion waits here until `resumeDeferred`.
   */
  hasRoom(): boolean;
  /** A progress report was dropped for want of room (counted and reported). */
  progressDropped(): void;
  /** The set of records changed and must be persisted before the next write. */
  changed(): void;
  /** Persist the records now (the durable record, with everything else it holds). */
  persist(): Promise<void>;
  /** The session the link speaks in now (null before the first welcome). */
  sessionId(): string | null;
  readonly timers: Timers;
  readonly logger: Logger;
}

export type StartSettlement =
  | { settle: 'applied' }
  /** Withhold the ack: the gate asked for a retry, at the latest at `retryBy` (the deadline, to answer it on time). */
  | { settle: 'failed'; reason: string; retryBy?: number }
  /** Accepted and dropped (refused permanently); the error frame is already queued. */
  | { settle: 'dropped'; reason: string };

export interface OperationBookOptions {
  /** How long a delivered conclusion is remembered for deduplication. Default 7 days. */
  retentionMs?: number;
  /** Most records kept; the oldest delivered conclusions go first. Default 10 000. */
  maxRecords?: number;
}

export class OperationBook {
  private readonly records = new Map<string, OperationRecord>();
  private readonly delivery: ConclusionDelivery;
  private readonly runner: OperationRunner;
  private readonly retentionMs: number;
  private readonly maxRecords: number;
  /**
   * The client is stopping (a graceful stop's `abortAll`, or `dispose` in any stop): none is
   * accepted from here on, also when its gate or its record's save completes after the stop.
   */
  private stopping = false;
  /** The deadline watches of starts whose admission gate is still deciding (cancelled by `dispose`). */
  private readonly gateWatches = new Set<() => void>();
  /**
   * Operations concluded at their deadline while their start waited behind an earlier frame:
   * when that start's turn comes its answer has already gone, so it is only settled.
   */
  private readonly answeredInQueue = new Set<string>();
  /**
   * Starts whose record's first save is still being written, by operation id: until it is, the
   * record is in memory only, and a redelivery of the start (the hub's replay after a resume, the
   * first copy's settlement lost with its link) must settle as that save does, not at once.
   */
  private readonly firstSaves = new Map<string, Promise<StartSettlement>>();
  /** Running operations whose `operation.accepted` was handed to the writer. */
  private readonly acceptSent = new Set<string>();
  /**
   * Running operations whose `operation.accepted` went before the last fresh session, which
   * discarded the replay buffer that may have held it unacknowledged: the hub's redelivered start
   * is the only thing that can bring it back. Answered in silence, the hub showed work that was
   * running as never accepted until its result came, and the redelivery (a request) went unanswered.
   */
  private readonly acceptLost = new Set<string>();

  constructor(
    initial: readonly OperationRecord[],
    private readonly host: OperationHost,
    private readonly handlers: Pick<OperatorHandlers, 'operation' | 'admitOperation'>,
    options: OperationBookOptions = {},
  ) {
    for (const r of initial) this.records.set(r.operationId, { ...r });
    this.delivery = new ConclusionDelivery(this.records, host);
    this.runner = new OperationRunner(host, handlers, (record, conclusion) => this.conclude(record, conclusion));
    this.retentionMs = options.retentionMs ?? 7 * 24 * 3600_000;
    this.maxRecords = options.maxRecords ?? 10_000;
  }

  /** Records to persist. */
  snapshot(): OperationRecord[] {
    return [...this.records.values()].map((r) => ({ ...r }));
  }

  get runningCount(): number {
    return this.runner.size;
  }

  get(operationId: string): OperationRecord | undefined {
    const r = this.records.get(operationId);
    return r ? { ...r } : undefined;
  }

  /**
   * After a restart: conclude what the crash interrupted, re-send undelivered conclusions. Those
   * the outbound log still holds (`replayable`: the frames a resume of the session replays) are
   * not queued again, only tracked: the replay carries them, and a fresh session, which drops the
   * log, sends them again (`freshSession`).
   */
  recover(replayable: readonly ReplayEntry[] = []): void {
    const inLog = conclusionsIn(this.records, replayable);
    for (const r of this.records.values()) {
      if (r.state === 'running') {
        this.host.logger.warn('operation interrupted by an operator restart; concluding it as failed', {
          operation_id: r.operationId,
          kind: r.kind,
        });
        this.conclude(r, {
          frame: 'result',
          outcome: 'failed',
          message: 'the operator restarted while the operation was running; it did not conclude',
        });
      } else if (!r.delivered) {
        const logged = inLog.get(r.operationId);
        if (logged) this.delivery.track(r.operationId, logged);
        else this.delivery.send(r, r.startId);
      }
    }
  }

  /** An `operation.start` from the hub (already decoded and in order), settled once its record is durable. */
  async start(payload: Payload<'operation.start'>, ctx: FrameContext): Promise<StartSettlement> {
    const r = await this.accept(payload, ctx);
    return r.settle === 'recorded' ? r.durable : r;
  }

  /**
   * An `operation.start` up to its save: settled now, or `recorded` (changed in the record, its
   * save requested) with `durable` settling it once the save completed. Starts applied while that
   * save is written share the next one (the receiver's group commit): one save per start would
   * rewrite every record per start, quadratic in a flood of them.
   */
  async accept(payload: Payload<'operation.start'>, ctx: FrameContext): Promise<StartSettlement | { settle: 'recorded'; durable: Promise<StartSettlement> }> {
    const known = this.records.get(payload.operation_id);
    if (known) {
      if (known.startId === ctx.frameId && this.answeredInQueue.delete(known.operationId)) {
        this.host.logger.debug('operation.start answered at its deadline while queued: settled, not run', { operation_id: known.operationId });
      } else if (known.state === 'running') {
        const saving = this.firstSaves.get(known.operationId);
        if (saving) {
          // Acked now, the start would be acknowledged while its record could still fail to be
          // written (and be forgotten) or be dropped by a stop: an operation the hub never sends
          // again, never run and never answered.
          this.host.logger.debug('redelivered operation.start whose record is being saved: settled with that save', { operation_id: known.operationId });
          return { settle: 'recorded', durable: saving.then((s): StartSettlement => (s.settle === 'failed' ? s : { settle: 'applied' })) };
        }
        if (this.acceptLost.delete(known.operationId)) {
          // If the hub had committed the first, a second is only history there.
          this.host.logger.info('redelivered operation.start for a running operation in a new session: accepted again, not run again', {
            operation_id: known.operationId,
          });
          this.host.send(outItem('operation.accepted', { operation_id: known.operationId }, ctx.frameId));
        } else {
          this.host.logger.debug('redelivered operation.start for a running operation dropped', { operation_id: known.operationId });
        }
      } else if (known.delivered && known.deliveredIn != null && known.deliveredIn === this.host.sessionId()) {
        // A replay after a resume (the start was numbered past a hole) or a start sent before
        // the hub stored the conclusion, whose ack came first: the hub holds the answer already,
        // and another would be stored as a second report of the one run. In another session it
        // is sent again: a hub that sends the start then has no answer (a database restored).
        this.host.logger.debug('redelivered operation.start for a concluded operation whose conclusion the hub acknowledged in this session: dropped', {
          operation_id: known.operationId,
        });
      } else if (this.delivery.onItsWay(known, ctx.frameId)) {
        this.host.logger.debug('redelivered operation.start for a concluded operation: its conclusion is already on its way in this session', {
          operation_id: known.operationId,
        });
      } else {
        this.host.logger.info('redelivered operation.start for a concluded operation: re-sending its conclusion', {
          operation_id: known.operationId,
        });
        this.delivery.send(known, ctx.frameId);
      }
      return { settle: 'applied' };
    }

    const now = this.host.timers.now();
    const deadline = timeMs(payload.deadline);
    const record = newRecord(payload, ctx.frameId, deadline, now);

    // The schema refuses a deadline that names no time, and timeMs reads every one it admits (a
    // leap second too: Date.parse reads none, and such a start was dropped unanswered); a NaN must
    // still never reach the record (JSON would write it as null, which the store cannot read back).
    if (!Number.isFinite(deadline)) return { settle: 'dropped', reason: `deadline ${payload.deadline} names no time` };
    if (!(deadline > now)) {
      this.records.set(record.operationId, record);
      this.conclude(record, { frame: 'error', code: 'deadline', message: `deadline ${payload.deadline} passed before the operation could start` });
      return { settle: 'applied' };
    }

    if (this.handlers.admitOperation) {
      // A gate still deciding at the deadline holds the stream as a slow handler ahead of a
      // queued start does: the hub is answered then, not when (if ever) the gate returns.
      const unwatch = scheduleAt(this.host.timers, deadline, () => this.deadlinePassedInQueue(payload, ctx.frameId, 'for its admission'));
      this.gateWatches.add(unwatch);
      const gate = await runHandler(() => this.handlers.admitOperation?.(payload, ctx));
      unwatch();
      this.gateWatches.delete(unwatch);
      if (this.answeredInQueue.delete(payload.operation_id)) {
        this.host.logger.debug('operation.start answered at its deadline while its admission was decided: settled, not run', { operation_id: payload.operation_id });
        return { settle: 'applied' };
      }
      if (!gate.ok && gate.retryable) return { settle: 'failed', reason: gate.reason, retryBy: deadline };
      if (!gate.ok) {
        this.records.set(record.operationId, record);
        this.conclude(record, { frame: 'error', code: gate.code ?? 'invalid', message: cutMessage(gate.reason) });
        return { settle: 'dropped', reason: gate.reason };
      }
    }

    // A stop began while the gate decided: no operation starts in a process that is going away
    // (abortAll could not reach it, and a stop that is not graceful does not wait for the gate);
    // the ack is withheld and the hub replays the start to the next process.
    if (this.stopping) return { settle: 'failed', reason: 'the operator is stopping: the start is left to the next process' };

    this.records.set(record.operationId, record);
    this.host.changed();
    // Recorded before the handler runs: a crash after it started and before the record was saved
    // would leave a process that knows nothing of it, and the hub's replay of the start would run
    // it a second time.
    const durable = this.host.persist().then(
      () => this.recorded(record, payload),
      (err: unknown): StartSettlement => {
        this.records.delete(record.operationId);
        this.host.logger.error('could not record an accepted operation durably; the start is retried', { operation_id: record.operationId, err });
        return { settle: 'failed', reason: 'the operation could not be recorded durably' };
      },
    );
    this.firstSaves.set(record.operationId, durable);
    const saved = () => {
      if (this.firstSaves.get(record.operationId) === durable) this.firstSaves.delete(record.operationId);
    };
    // Either way: a start that failed past its save (a throw in `recorded`) must not stay here,
    // nor leave a rejection no one handles (the receiver handles `durable`'s own).
    void durable.then(saved, saved);
    return { settle: 'recorded', durable };
  }

  /** The start's record is durable: run it, unless a stop or its deadline came first. */
  private recorded(record: OperationRecord, payload: Payload<'operation.start'>): StartSettlement {
    const deadline = record.deadline;
    if (this.stopping) {
      // The stop began during the save: forget it again (the stop's final save drops it; a crash
      // before that leaves it recorded as running, which the next process concludes as failed).
      this.records.delete(record.operationId);
      this.host.changed();
      return { settle: 'failed', reason: 'the operator is stopping: the start is left to the next process' };
    }
    if (!(deadline > this.host.timers.now())) {
      // The gate or the save took it past its deadline (a timer due now has not fired yet): it is
      // answered as a start that came too late, never run to act after it.
      this.conclude(record, { frame: 'error', code: 'deadline', message: `deadline ${payload.deadline} passed before the operation could start` });
      return { settle: 'applied' };
    }
    this.acceptSent.add(record.operationId);
    this.host.send(outItem('operation.accepted', { operation_id: record.operationId }, record.startId));
    this.runner.run(record, payload);
    return { settle: 'applied' };
  }

  /**
   * The deadline of a start still waiting behind an earlier frame's handler (or for its own
   * `admitOperation` to decide) passed: the spec wants an answer then, not when the handler
   * returns. It is concluded as a start whose
   * deadline passed before it could start (recorded, so a redelivery or a restart re-sends the
   * conclusion and never runs it). A stopping process leaves it to the next, which answers it at
   * once.
   */
  deadlinePassedInQueue(payload: Payload<'operation.start'>, frameId: string, waiting = 'behind an earlier frame'): void {
    if (this.stopping || this.records.has(payload.operation_id)) return;
    const record = newRecord(payload, frameId, timeMs(payload.deadline), this.host.timers.now());
    this.host.logger.warn(`operation.start missed its deadline waiting ${waiting}`, { operation_id: record.operationId, kind: record.kind });
    this.records.set(record.operationId, record);
    this.answeredInQueue.add(record.operationId);
    this.conclude(record, { frame: 'error', code: 'deadline', message: `deadline ${payload.deadline} passed before the operation could start` });
  }

  /** The hub acknowledged everything through `peerAck`: conclusions at or below it are delivered. */
  acknowledged(peerAck: number): void {
    let changed = false;
    for (const id of this.delivery.acknowledged(peerAck)) {
      const r = this.records.get(id);
      if (r && !r.delivered) {
        r.delivered = true;
        r.deliveredIn = this.host.sessionId();
        changed = true;
      }
    }
    if (changed) {
      this.prune();
      this.host.changed();
    }
  }

  /** A fresh session dropped the replay buffer: conclusions written but not acked go again. */
  freshSession(): void {
    // The old session's frames are not replayed: their turn never comes.
    this.answeredInQueue.clear();
    for (const id of this.acceptSent) this.acceptLost.add(id);
    this.delivery.freshSession();
  }

  /** Ask every running operation to stop (the client is stopping). */
  abortAll(reason: string): void {
    this.stopping = true;
    this.runner.abortAll(reason);
  }

  /** Resolves once no operation is running. */
  whenIdle(): Promise<void> {
    return this.runner.whenIdle();
  }

  /**
   * Cancel timers without concluding (the process is going away), and accept nothing more: a
   * stop that is not graceful never called `abortAll`, and a start whose gate or save completes
   * after it would otherwise run in a stopped client, unrecorded and unacknowledged, and run again
   * in the next process when the hub replays it.
   */
  dispose(): void {
    this.stopping = true;
    this.runner.cancelDeadlines();
    for (const unwatch of this.gateWatches) unwatch();
    this.gateWatches.clear();
  }

  private conclude(record: OperationRecord, conclusion: StoredConclusion): void {
    this.acceptSent.delete(record.operationId);
    this.acceptLost.delete(record.operationId);
    record.state = 'concluded';
    record.conclusion = conclusion;
    record.concludedAt = this.host.timers.now();
    record.delivered = false;
    record.deliveredIn = null;
    this.host.changed();
    this.delivery.send(record, record.startId);
  }

  /** Whether conclusions wait for room in the send queue. */
  get hasDeferred(): boolean {
    return this.delivery.hasDeferred;
  }

  /** Queue the conclusions that waited for room, while there is room. */
  resumeDeferred(): void {
    this.delivery.resumeDeferred();
  }

  /** Forget delivered conclusions past retention, and the oldest ones beyond the cap. */
  private prune(): void {
    const now = this.host.timers.now();
    for (const [id, r] of this.records) {
      if (r.state === 'concluded' && r.delivered && r.concludedAt !== null && now - r.concludedAt > this.retentionMs) {
        this.records.delete(id);
      }
    }
    if (this.records.size <= this.maxRecords) return;
    const forgettable = [...this.records.values()]
      .filter((r) => r.state === 'concluded' && r.delivered)
      .sort((a, b) => (a.concludedAt ?? 0) - (b.concludedAt ?? 0));
    for (const r of forgettable) {
      if (this.records.size <= this.maxRecords) break;
      this.records.delete(r.operationId);
    }
  }
}

/** The record of a start just accepted, before anything ran: `startId` is the frame its reports answer. */
function newRecord(payload: Payload<'operation.start'>, startId: string, deadline: number, now: number): OperationRecord {
  return {
    operationId: payload.operation_id,
    startId,
    kind: payload.kind,
    deadline,
    acceptedAt: now,
    state: 'running',
    conclusion: null,
    concludedAt: null,
    delivered: false,
  };
}
