/**
 * What the operator tells the hub besides answers: the application's reports (through the
 * bounded send queue), the observed snapshot (resync), and `link.stats`. It decides when a
 * snapshot streams (after a fresh welcome, when a new process continues a session, on request,
 * and after the queue evicted state under backpressure) and when the counters are reported; the write pump
 * (writer.ts) takes it from there.
 *
 * One observed snapshot at a time, from the call to the application's `snapshot()` to the
 * `stream.end` being written: a request meanwhile is remembered (one flag, however many) and runs
 * after it. Two streams in flight would make the outbox abandon the first after its
 * `resync.begin` went out, leaving the hub a begin that no `stream.end` closes.
 */
import { newId, type PushOutcome } from '../protocol';
import type { ClientStats } from './client-types';
import type { LinkCounters, LinkStatsReporter } from './link-stats';
import type { Logger } from './logger';
import { outItem, type OutItem } from './outgoing';
import type { Outbox } from './outbox';
import { ObservedResync, type ObservedSnapshot } from './resync';
import { elapsed, type Timers } from './timers';

export interface SendSideHost {
  readonly timers: Timers;
  readonly log: Logger;
  readonly counters: ClientStats;
  readonly outbox: Outbox;
  readonly linkStats: LinkStatsReporter;
  readonly snapshot: () => ObservedSnapshot | Promise<ObservedSnapshot>;
  readonly reobserveDelayMs: number;
  /** Uniform in [0, 1): the jitter of snapshot retries. */
  readonly random: () => number;
  /** Bumped on every fresh session: a snapshot taken under an older one is not streamed. */
  sessionGen(): number;
  /** A session is open (welcomed link). */
  open(): boolean;
  stopping(): boolean;
  requestPump(): void;
}

/** Retries of a failed `snapshot()` while the link stays up: 1 s doubling to 30 s, jittered. */
export const SNAPSHOT_RETRY = { baseMs: 1_000, capMs: 30_000 } as const;

/**
 * The delay before retry `failures` of a snapshot that threw: "equal jitter", between half the
 * ceiling and the ceiling, so a fleet whose API servers failed together does not retry in
 * lockstep, and none retries a failing API server at once. Pure.
 */
export function snapshotRetryDelay(failures: number, random: number): number {
  const ceiling = Math.min(SNAPSHOT_RETRY.capMs, SNAPSHOT_RETRY.baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
  const unit = random >= 0 && random < 1 ? random : 0;
  return Math.round(ceiling / 2 + unit * (ceiling / 2));
}

export class SendSide {
  /** A snapshot to stream once the next session opens (or, while one is open, at the retry below). */
  resyncAfterOpen = false;
  /** Why a snapshot was requested while one was being taken or streamed: it follows that one's end. */
  private resyncQueued: string | null = null;
  /** `snapshot()` has been called and has not settled: set before the await, so a second request queues. */
  private snapshotting = false;
  /** Consecutive `snapshot()` failures (for the retry delay). */
  private snapshotFailures = 0;
  private cancelSnapshotRetry: (() => void) | null = null;
  private cancelStats: (() => void) | null = null;
  private cancelReobserve: (() => void) | null = null;

  constructor(private readonly host: SendSideHost) {}

  enqueue(item: OutItem): PushOutcome {
    const { outbox } = this.host;
    const evictedBefore = outbox.counters.evictedFrames;
    const outcome = outbox.push(item);
    if (outcome !== 'appended') this.scheduleStats();
    if (outbox.counters.evictedFrames > evictedBefore) this.scheduleReobserve();
    if (outcome === 'rejected') this.host.log.error('send queue refused a frame', { type: item.type });
    this.host.requestPump();
    return outcome;
  }

  /** Stream the complete observed state now, or once the next session opens. */
  resync(): void {
    if (this.host.open()) void this.startResync('requested');
    else this.resyncAfterOpen = true;
  }

  /** A fresh session: a stream numbered under the old one must not continue. */
  freshSession(): void {
    this.host.outbox.dropResync();
    this.resyncQueued = null;
  }

  /** A session opened: its first link.stats, and the snapshot it is owed. */
  opened(fresh: boolean): void {
    this.host.linkStats.sessionOpened();
    this.enqueue(outItem('link.stats', this.host.linkStats.take(this.linkCounters(), elapsed(this.host.timers))));
    if (fresh || this.resyncAfterOpen) {
      void this.startResync(fresh ? 'fresh session' : 'a new process continues the session');
      return;
    }
    // A stream.end numbered on the link that closed goes out in the resume's replay, which
    // `wrote` never sees: a request queued behind that stream would otherwise wait forever.
    this.runQueued();
  }

  /** The link ended: a snapshot retry waits for the next welcome (`resyncAfterOpen` stays set). */
  linkClosed(): void {
    this.stopSnapshotRetry();
  }

  /** Frames reached the socket: a written `stream.end` may let a queued snapshot start. */
  wrote(written: readonly { item: OutItem; seq: number }[]): void {
    for (const w of written) {
      if (w.item.type !== 'stream.end') continue;
      this.host.log.info('observed resync written', { seq: w.seq, ...(w.item.payload as object) });
      this.runQueued();
    }
  }

  /** The counters changed (a handler failure, a queue loss): report them, at most once per interval. */
  scheduleStats(): void {
    if (this.cancelStats) return;
    const due = this.host.linkStats.dueIn(this.linkCounters(), elapsed(this.host.timers));
    if (due === null) return;
    this.cancelStats = this.host.timers.schedule(() => {
      this.cancelStats = null;
      // Between sessions the next welcome sends a fresh report anyway.
      if (!this.host.open()) return;
      this.enqueue(outItem('link.stats', this.host.linkStats.take(this.linkCounters(), elapsed(this.host.timers))));
    }, due);
  }

  /**
   * A graceful stop: counters that changed since the last report go out now, within the drain,
   * instead of at an interval the process will not live to see (a drop in the last seconds before
   * a stop would never be reported: the next process counts from zero under a new epoch).
   */
  flushStats(): void {
    if (!this.host.open() || this.host.linkStats.dueIn(this.linkCounters(), elapsed(this.host.timers)) === null) return;
    this.cancelStats?.();
    this.cancelStats = null;
    this.enqueue(outItem('link.stats', this.host.linkStats.take(this.linkCounters(), elapsed(this.host.timers))));
  }

  dispose(): void {
    this.cancelStats?.();
    this.cancelReobserve?.();
    this.cancelReobserve = null;
    this.stopSnapshotRetry();
  }

  private linkCounters(): LinkCounters {
    return { ...this.host.outbox.counters, handlerFailures: this.host.counters.handlerFailures, droppedProgress: this.host.counters.droppedProgress };
  }

  /**
   * A state frame was evicted (or refused) by the full queue: its statement is gone, and unless
   * the application happens to report that subject again the hub would keep the stale row
   * until the next periodic resync. The spec allows the eviction because "the sender will
   * observe the state again"; the SDK is the sender, so it does: a snapshot once the burst has
   * had a moment to pass (at most one per `reobserveDelayMs`; a resync already streaming queues
   * the next one behind it).
   */
  private scheduleReobserve(): void {
    if (this.cancelReobserve || this.host.stopping()) return;
    this.cancelReobserve = this.host.timers.schedule(() => {
      this.cancelReobserve = null;
      if (this.host.stopping()) return;
      this.host.log.warn('state frames were evicted under backpressure: streaming an observed snapshot so the hub observes them again', {
        evicted_frames: this.host.outbox.counters.evictedFrames,
      });
      this.resync();
    }, this.host.reobserveDelayMs);
  }

  /** A resync queued behind the one that just ended (or never started) runs now, or at the next welcome. */
  private runQueued(): void {
    const reason = this.resyncQueued;
    if (reason === null || this.snapshotting || this.host.outbox.resyncInProgress || this.host.stopping()) return;
    this.resyncQueued = null;
    if (this.host.open()) void this.startResync(reason);
    else this.resyncAfterOpen = true;
  }

  private stopSnapshotRetry(): void {
    this.cancelSnapshotRetry?.();
    this.cancelSnapshotRetry = null;
  }

  /**
   * `snapshot()` threw (an API server blip while listing). The snapshot is still owed: a fresh
   * session's hub prunes against nothing until it comes. While the link stays up it is retried
   * with backoff (no welcome may come for hours); while it is down, at the next welcome.
   */
  private snapshotFailed(err: unknown, reason: string): void {
    const h = this.host;
    this.snapshotFailures++;
    this.resyncAfterOpen = true;
    // A request queued behind this attempt is served by its retry: one snapshot, taken later.
    this.resyncQueued = null;
    if (!h.open()) {
      h.log.error('taking the observed snapshot failed; resync retried after the next welcome', { err, reason, failures: this.snapshotFailures });
      return;
    }
    const delay = snapshotRetryDelay(this.snapshotFailures, h.random());
    h.log.error('taking the observed snapshot failed; retrying', { err, reason, failures: this.snapshotFailures, retry_in_ms: delay });
    this.stopSnapshotRetry();
    this.cancelSnapshotRetry = h.timers.schedule(() => {
      this.cancelSnapshotRetry = null;
      // The link closed meanwhile (its close cancels this timer, but be sure): the welcome path runs it.
      if (!this.resyncAfterOpen || !h.open() || h.stopping()) return;
      void this.startResync('retry after a failed snapshot');
    }, delay);
  }

  private async startResync(reason: string): Promise<void> {
    const h = this.host;
    if (this.snapshotting || h.outbox.resyncInProgress) {
      // Superseding a stream midway would leave the hub a begin without an end, and a snapshot
      // being taken is about to become one: run after it.
      this.resyncQueued = reason;
      return;
    }
    // This snapshot serves whatever was owed (a failure owes it again).
    this.resyncAfterOpen = false;
    this.stopSnapshotRetry();
    const sessionGen = h.sessionGen();
    let snapshot: ObservedSnapshot;
    this.snapshotting = true;
    // A report made from here on may be newer than what snapshot() lists: it goes after the stream.
    if (!h.stopping()) h.outbox.holdReports();
    try {
      snapshot = await h.snapshot();
    } catch (err) {
      this.snapshotting = false;
      this.releaseReports();
      if (h.stopping()) return;
      // Taken for a session that has since been replaced: the new one asked for its own (queued).
      if (sessionGen !== h.sessionGen()) return this.runQueued();
      this.snapshotFailed(err, reason);
      return;
    }
    this.snapshotting = false;
    if (h.stopping() || sessionGen !== h.sessionGen()) {
      this.releaseReports();
      if (h.stopping()) return;
      return this.runQueued();
    }
    let stream: ObservedResync;
    try {
      stream = new ObservedResync(snapshot, () => newId(h.timers.now()));
    } catch (err) {
      // Not an ObservedSnapshot (a list missing, nothing at all): the application's error, refused
      // like a snapshot() that threw, never an unhandled rejection.
      this.releaseReports();
      this.snapshotFailed(new TypeError(`snapshot() did not answer an ObservedSnapshot: ${err instanceof Error ? err.message : String(err)}`), reason);
      return;
    }
    this.snapshotFailures = 0;
    if (stream.problems.length > 0) {
      const problems = stream.problems.slice(0, 10);
      h.log.error('observed snapshot has invalid objects: the stream will be marked incomplete', { problems });
    }
    h.log.info('streaming observed resync', { reason, begin: stream.beginId, scope: stream.scope });
    h.counters.resyncsSent++;
    // The stream goes out whole before the queue: what was held follows its stream.end.
    // What the snapshot superseded is counted, and the hub told (link.stats) like any other loss.
    const evictedBefore = h.outbox.counters.evictedFrames;
    h.outbox.startResync(stream);
    this.scheduleStats();
    // A lost removal it queued again took an older state frame's place in the full queue.
    if (h.outbox.counters.evictedFrames > evictedBefore) this.scheduleReobserve();
    h.outbox.releaseReports();
    h.requestPump();
  }

  /** The queue flows again (no snapshot is streamed now, so nothing waits for one). */
  private releaseReports(): void {
    this.host.outbox.releaseReports();
    this.host.requestPump();
  }

  /** A stop begins: a snapshot taken now is not streamed, so reports no longer wait for it. */
  stopBegins(): void {
    this.releaseReports();
  }
}
