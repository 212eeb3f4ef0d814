import { applyIngestBatch, type IngestResult, type SessionFence } from '../db/ingest';
import { classifyDbError, describeError } from '../db/errors';
import type { Sql } from '../db/sql';
import type { Logger } from '../log';
import { buildBatch, type BuiltBatch, type InboundItem, type SentDesiredLookup } from './ingest-batch';
import type { OpResync } from './store';

export interface IngestHost {
  sql: Sql;
  fence(): SessionFence | null;
  resyncs(): Record<string, OpResync>;
  /** Resolves an operator error's reply_to to the deployment.desired it answers. */
  sentDesired: SentDesiredLookup;
  /** The batch is committed in Postgres: settle its frames, persist the cursor, send the ack. */
  committed(items: InboundItem[], built: BuiltBatch, result: IngestResult): void;
  /** The statement found the session no longer owns the cluster: nothing was written. */
  fenceLost(): void;
  /** Whether retrying still helps: with no connection the peer will replay after its resume anyway. */
  keepRetrying(): boolean;
  log: Logger;
}

const MAX_RETRY_DELAY_MS = 2_000;

/**
 * Applies accepted frames in batches: whatever arrived while the previous batch was in flight
 * forms the next one, so one round trip carries many frames. Ack means applied: nothing is
 * settled until its batch commits.
 *
 * - Transient failure (connection, timeout, lock, unknown): the same frames are retried, in
 *   order, with backoff; newer frames queue behind them. The session closes the connection
 *   when the oldest has waited too long, so the peer replays from the cursor.
 * - Permanent failure (the data itself, SQLSTATE class 21/22/23): the batch is split until the
 *   frame the database refuses is alone; that one becomes a recorded rejection.
 */
export class IngestPipeline {
  private pending: InboundItem[] = [];
  private running: Promise<void> | null = null;
  private stopping = false;
  private chunkLimit: number;
  private retryDelay = 0;
  private wake: (() => void) | null = null;
  /** Consecutive transient failures, for the live view. */
  transientFailures = 0;

  constructor(
    private readonly host: IngestHost,
    private readonly maxBatch: number,
  ) {
    this.chunkLimit = maxBatch;
  }

  get size(): number {
    return this.pending.length;
  }

  /** When the oldest unapplied frame arrived, or null when everything is applied. */
  oldestArrival(): number | null {
    return this.pending[0]?.arrivedAt ?? null;
  }

  push(item: InboundItem): void {
    this.pending.push(item);
    this.kick();
  }

  kick(): void {
    if (this.running || this.stopping) return;
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
      this.pending = [];
      this.stopping = false;
      this.chunkLimit = this.maxBatch;
      this.retryDelay = 0;
      this.transientFailures = 0;
    }
  }

  private async run(): Promise<void> {
    try {
      // Let frames that arrive in the same tick join the first batch.
      await Promise.resolve();
      while (this.pending.length > 0 && !this.stopping) {
        const fence = this.host.fence();
        if (!fence) return;
        const chunk = this.pending.slice(0, this.chunkLimit);
        const built = buildBatch(chunk, this.host.resyncs(), this.host.sentDesired);
        let result: IngestResult;
        try {
          result = await applyIngestBatch(this.host.sql, fence, built.batch);
        } catch (err) {
          if (this.stopping) return;
          if (classifyDbError(err) === 'permanent') {
            this.onPermanent(chunk, err);
            continue;
          }
          if (!this.host.keepRetrying()) {
            this.host.log.warn('ingest failed with no connection left; dropping unapplied frames for replay', {
              error: describeError(err),
              frames: this.pending.length,
            });
            this.pending = [];
            return;
          }
          this.transientFailures++;
          this.retryDelay = Math.min(MAX_RETRY_DELAY_MS, this.retryDelay ? this.retryDelay * 2 : 50);
          this.host.log.warn('ingest batch failed; ack withheld, will retry', {
            error: describeError(err),
            frames: chunk.length,
            first_seq: chunk[0]?.seq,
            retry_ms: this.retryDelay,
          });
          await this.sleep(this.retryDelay);
          continue;
        }
        if (this.stopping && !result.fenced) return;
        if (!result.fenced) {
          this.host.fenceLost();
          return;
        }
        this.pending.splice(0, chunk.length);
        this.transientFailures = 0;
        this.retryDelay = 0;
        this.chunkLimit = Math.min(this.maxBatch, this.chunkLimit * 2);
        this.host.committed(chunk, built, result);
      }
    } finally {
      // Cleared in the same turn as the last look at `pending`: a `.finally()` on the promise
      // would clear it a microtask later, and a frame pushed in between would wait for the next push.
      this.running = null;
    }
  }

  private onPermanent(chunk: InboundItem[], err: unknown): void {
    if (chunk.length > 1) {
      this.chunkLimit = Math.ceil(chunk.length / 2);
      this.host.log.warn('ingest batch refused by the database; splitting to find the frame', {
        error: describeError(err),
        frames: chunk.length,
        first_seq: chunk[0]?.seq,
      });
      return;
    }
    const [item] = chunk as [InboundItem];
    // Alone and still refused: a permanently unappliable frame. Accept, record, move on.
    this.pending[0] = {
      seq: item.seq,
      id: item.id,
      replyTo: item.replyTo,
      type: item.type,
      arrivedAt: item.arrivedAt,
      kind: 'poison',
      reason: `database refused the frame: ${describeError(err).slice(0, 500)}`,
    };
    this.host.log.error('poison frame: database refused it; recording rejection', {
      seq: item.seq,
      type: item.type,
      frame_id: item.id,
      error: describeError(err),
    });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
    });
  }
}
