import type { DesiredItem } from './desired-admin';
import { jsonUtf8Length } from '../../protocol';

/** One statement's outcome for a cluster's items: the first item's revision, the rest follow in order. */
export interface BatchWritten {
  cluster_uid: string;
  first_revision: number;
  owner_session: string | null;
  /** The claim may have changed hands while the statement ran: the owner is looked up again (desired-admin.ts OWNER_RECHECK). */
  recheck_owner?: boolean;
}

export interface PutWritten {
  cluster_uid: string;
  revision: number;
  owner_session: string | null;
}

export interface CoalesceHost {
  /** Write the items in one statement and one commit, in the order given. Null: no such cluster. */
  /**
   * `sendWithinMs`: what is left of the oldest item's wait, for the statement to be sent in;
   * `oldest`: when the oldest item was taken, from which its arrival deadline counts.
   */
  write(cluster: string, items: readonly DesiredItem[], sendWithinMs: number, oldest: number): Promise<BatchWritten | null>;
  /** After each commit, with everything it wrote (one poke per statement, not per item). */
  written(w: BatchWritten, items: readonly DesiredItem[]): void;
  /** `written` threw (a bug, not a state): say so; the writes stand. */
  pokeFailed(err: unknown): void;
  /** The statement failed because of one item's data, and was surely rolled back: each can be retried alone. */
  itemFault(err: unknown): boolean;
}

interface Waiter {
  item: DesiredItem;
  /** When it was queued (`now()`), for the wait bound. */
  queuedAt: number;
  resolve(w: PutWritten | null): void;
  reject(err: unknown): void;
}

/** A PUT that waited past `maxWaitMs` for its cluster's statement: refused unwritten. */
export class QueueWaitError extends Error {
  override readonly name = 'QueryTimeoutError';
  readonly code = null;
  constructor(waitedMs: number) {
    super(`desired write waited ${waitedMs} ms behind its cluster's statement; not written`);
  }
}

export interface CoalesceLimits {
  /** The most items in one statement. */
  maxBatch: number;
  /**
   * The most serving bytes in one statement (a lone item is written whatever its size). A count
   * alone let a burst of large PUTs become one statement of tens of MB: it outlived its deadline
   * and failed every PUT in it, and its poke outgrew what one RPC carries.
   */
  maxBytes: number;
  /**
   * The longest a PUT may wait behind its cluster's statement before its own starts: the
   * caller's deadline less one statement's. A PUT waited on longer would be written after its
   * caller gave up (a 503 "retry" for a change that then reaches the operator).
   */
  maxWaitMs: number;
  now(): number;
}

/**
 * Group commit for single-deployment PUTs. Every PUT of a cluster bumps that cluster's revision
 * row, so concurrent ones queue on its lock, each paying a commit, and each costs a poke of the
 * owner. A PUT that arrives while nothing is being written for its cluster is written at once (a
 * lone change waits for nothing); PUTs that arrive while a statement runs are written together by
 * the next one: one statement, one commit, one poke, each item still with its own revision, in
 * arrival order. A batch never names a deployment twice (one statement cannot update a row twice;
 * the second waits for the next batch), and is capped at `maxBatch` items. A PUT whose wait
 * behind the statement before it passed `maxWaitMs` is refused unwritten, never written late.
 */
export class PutCoalescer {
  /** Waiting PUTs per cluster; a cluster is present while its drain runs. */
  private readonly waiting = new Map<string, Waiter[]>();

  private readonly limits: CoalesceLimits;

  constructor(
    private readonly host: CoalesceHost,
    limits: Partial<CoalesceLimits> = {},
  ) {
    this.limits = { maxBatch: 500, maxBytes: 4 << 20, maxWaitMs: Number.POSITIVE_INFINITY, now: Date.now, ...limits };
  }

  /** `takenAt`: when the write was taken (its caller's clock), never later than now. */
  put(cluster: string, item: DesiredItem, takenAt?: number): Promise<PutWritten | null> {
    return new Promise((resolve, reject) => {
      const now = this.limits.now();
      const waiter = { item, queuedAt: takenAt === undefined ? now : Math.min(takenAt, now), resolve, reject };
      const queue = this.waiting.get(cluster);
      if (queue) {
        queue.push(waiter);
        return;
      }
      this.waiting.set(cluster, [waiter]);
      void this.drain(cluster);
    });
  }

  /** Items waiting for the given cluster (for tests and diagnostics). */
  pending(cluster: string): number {
    return this.waiting.get(cluster)?.length ?? 0;
  }

  private async drain(cluster: string): Promise<void> {
    const queue = this.waiting.get(cluster) as Waiter[];
    while (queue.length > 0) {
      const batch = this.unexpired(takeBatch(queue, this.limits.maxBatch, this.limits.maxBytes));
      if (batch.length > 0) await this.writeBatch(cluster, batch);
    }
    this.waiting.delete(cluster);
  }

  private async writeBatch(cluster: string, batch: Waiter[]): Promise<void> {
    const items = batch.map((w) => w.item);
    const oldest = Math.min(...batch.map((one) => one.queuedAt));
    let w: BatchWritten | null;
    try {
      w = await this.host.write(cluster, items, this.limits.maxWaitMs - (this.limits.now() - oldest), oldest);
    } catch (err) {
      if (batch.length > 1 && this.host.itemFault(err)) {
        // Rolled back as a whole: alone, each item gets its own answer and the others are written
        // (each still within its wait: these statements run one after the other).
        for (const one of batch) if (this.unexpired([one]).length > 0) await this.writeBatch(cluster, [one]);
        return;
      }
      for (const one of batch) one.reject(err);
      return;
    }
    if (!w) {
      for (const one of batch) one.resolve(null);
      return;
    }
    // Committed whatever the poke does. A throw here must not end the drain: the cluster would
    // stay marked as draining and every later PUT of it on this shard would wait forever. The
    // owner misses this poke only; the fleet poll finds the revision it has not seen.
    try {
      this.host.written(w, items);
    } catch (err) {
      this.host.pokeFailed(err);
    }
    batch.forEach((one, i) => one.resolve({ cluster_uid: w.cluster_uid, revision: w.first_revision + i, owner_session: w.owner_session }));
  }

  /** The waiters still within their wait; the others are refused, unwritten. */
  private unexpired(batch: Waiter[]): Waiter[] {
    const now = this.limits.now();
    return batch.filter((w) => {
      const waited = now - w.queuedAt;
      if (waited <= this.limits.maxWaitMs) return true;
      w.reject(new QueueWaitError(waited));
      return false;
    });
  }
}

/**
 * The longest prefix of the queue, up to `max` items and `maxBytes` of serving, that names no
 * deployment twice (taken off the queue); always at least one item. Sizes are measured only when
 * there is more than one to take: a lone PUT pays nothing for the bound.
 */
export function takeBatch<T extends { item: { deployment_id: string; serving: unknown } }>(queue: T[], max: number, maxBytes = Number.POSITIVE_INFINITY): T[] {
  if (queue.length <= 1) return queue.splice(0, 1);
  const seen = new Set<string>();
  let n = 0;
  let bytes = 0;
  while (n < queue.length && n < max) {
    const { item } = queue[n] as T;
    if (seen.has(item.deployment_id)) break;
    bytes += jsonUtf8Length(item.serving);
    if (n > 0 && bytes > maxBytes) break;
    seen.add(item.deployment_id);
    n++;
  }
  return queue.splice(0, Math.max(1, n));
}
