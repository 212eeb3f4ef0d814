/**
 * Running accepted operations: the application's handler, its deadline, its progress reports
 * and its abort signal. What is run, and when, is the operation book's (operations.ts); this
 * module runs a recorded operation to one conclusion and hands that back to the book.
 */
import { cutText, type Payload } from '../protocol';
import type { OperationRecord, StoredConclusion } from './cursor-store';
import { errorText, type OperationConclusion, type OperatorHandlers } from './handlers';
import type { Logger } from './logger';
import { outItem, type OutItem } from './outgoing';
import { scheduleAt, type Timers } from './timers';

export interface RunnerHost {
  send(item: OutItem): void;
  /** Whether a report may be queued now (progress without room is dropped and counted). */
  hasRoom(): boolean;
  /** A progress report was dropped for want of room: counted, and reported in `link.stats`. */
  progressDropped(): void;
  readonly timers: Timers;
  readonly logger: Logger;
}

interface Running {
  abort: AbortController;
  cancelDeadline: () => void;
}

const MESSAGE_MAX = 2048;
/** At most `n` characters as the protocol counts them (code points): never half a surrogate pair. */
export function cutMessage(s: string, n = MESSAGE_MAX): string {
  return cutText(s, n) === s ? s : cutText(s, n - 1) + '…';
}

export class OperationRunner {
  private readonly running = new Map<string, Running>();
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly host: RunnerHost,
    private readonly handlers: Pick<OperatorHandlers, 'operation'>,
    /** Conclude a running record (the book records and sends it); the runner checks `state` first. */
    private readonly conclude: (record: OperationRecord, conclusion: StoredConclusion) => void,
  ) {}

  get size(): number {
    return this.running.size;
  }

  /** Ask every running operation to stop. */
  abortAll(reason: string): void {
    for (const run of this.running.values()) run.abort.abort(new Error(reason));
  }

  /** Cancel the deadlines without concluding (the process is going away). */
  cancelDeadlines(): void {
    for (const run of this.running.values()) run.cancelDeadline();
  }

  /** Resolves once no operation is running. */
  whenIdle(): Promise<void> {
    if (this.running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  run(record: OperationRecord, payload: Payload<'operation.start'>): void {
    const abort = new AbortController();
    const { timers, logger } = this.host;
    const cancelDeadline = scheduleAt(timers, record.deadline, () => {
      if (record.state !== 'running') return;
      logger.warn('operation missed its deadline', { operation_id: record.operationId, kind: record.kind });
      this.conclude(record, { frame: 'error', code: 'deadline', message: `the operation did not conclude by ${payload.deadline}` });
      abort.abort(new Error('deadline passed'));
    });
    this.running.set(record.operationId, { abort, cancelDeadline });

    const ctx = {
      operationId: record.operationId,
      startId: record.startId,
      deadline: record.deadline,
      signal: abort.signal,
      progress: (phase: string, message = '') => {
        if (record.state !== 'running') return;
        if (!this.host.hasRoom()) {
          this.host.progressDropped();
          logger.debug('operation progress dropped: the send queue is full of control frames', { operation_id: record.operationId });
          return;
        }
        this.host.send(
          outItem(
            'operation.progress',
            { operation_id: record.operationId, phase: cutMessage(phase.trim() || 'progress', 64), message: cutMessage(message) },
            record.startId,
          ),
        );
      },
    };

    void Promise.resolve()
      .then(() => this.handlers.operation(payload, ctx))
      .then(
        (c) => normalizeConclusion(c),
        (err: unknown): OperationConclusion => ({
          outcome: 'failed',
          message: `operation handler threw: ${errorText(err)}`,
        }),
      )
      .then((c) => {
        if (record.state !== 'running') {
          logger.info('operation finished after it was already concluded; result ignored', {
            operation_id: record.operationId,
            outcome: c.outcome,
          });
          return;
        }
        this.conclude(record, { frame: 'result', outcome: c.outcome, message: cutMessage(c.message ?? '') });
      })
      .finally(() => {
        this.running.get(record.operationId)?.cancelDeadline();
        this.running.delete(record.operationId);
        if (this.running.size === 0) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          for (const w of waiters) w();
        }
      });
  }
}

const OUTCOMES: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled']);

/**
 * Read what the handler returned. Never throws: it runs in the chain that concludes the
 * operation, and a getter of the application's that throws there would leave the operation
 * running forever and the chain's rejection unhandled.
 */
function normalizeConclusion(c: unknown): OperationConclusion {
  try {
    if (c && typeof c === 'object') {
      const { outcome, message } = c as { outcome?: unknown; message?: unknown };
      if (typeof outcome === 'string' && OUTCOMES.has(outcome)) {
        return { outcome: outcome as OperationConclusion['outcome'], message: typeof message === 'string' ? message : '' };
      }
    }
  } catch (err) {
    return { outcome: 'failed', message: `operation handler's conclusion could not be read: ${errorText(err)}` };
  }
  return { outcome: 'failed', message: 'operation handler returned no recognizable outcome' };
}
