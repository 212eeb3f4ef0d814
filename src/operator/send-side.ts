/**
 * What the operator tells the hub besides answers: the application's reports (through the
 * bounded send queue), the observed snapshot (resync), and `link.stats`. It decides when a
 * snapshot streams (after a fresh welcome, when a new process continues a session, on request,
 * and after the queue evicted state under backpressure) and when the counters are reported; the write pump
 * (writer.ts) takes it from there.
 */
import { newId, type PushOutcome } from '../protocol';
import type { ClientStats } from './client-types';
import type { LinkCounters, LinkStatsReporter } from './link-stats';
import type { Logger } from './logger';
import { outItem, type OutItem } from './outgoing';
import type { Outbox } from './outbox';
import { ObservedResync, type ObservedSnapshot } from './resync';
import type { Timers } from './timers';

export interface SendSideHost {
  readonly timers: Timers;
  readonly log: Logger;
  readonly counters: ClientStats;
  readonly outbox: Outbox;
  readonly linkStats: LinkStatsReporter;
  readonly snapshot: () => ObservedSnapshot | Promise<ObservedSnapshot>;
  readonly reobserveDelayMs: number;
  /** Bumped on every fresh session: a snapshot taken under an older one is not streamed. */
  sessionGen(): number;
  /** A session is open (welcomed link). */
  open(): boolean;
  stopping(): boolean;
  requestPump(): void;
}

export class SendSide {
  /** A snapshot to stream once the next session opens. */
  resyncAfterOpen = false;
  /** A snapshot requested while one was streaming: it follows that one's end. */
  private resyncQueued = false;
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
    this.resyncQueued = false;
  }

  /** A session opened: its first link.stats, and the snapshot it is owed. */
  opened(fresh: boolean): void {
    this.host.linkStats.sessionOpened();
    this.enqueue(outItem('link.stats', this.host.linkStats.take(this.linkCounters(), this.host.timers.now())));
    if (fresh || this.resyncAfterOpen) {
      this.resyncAfterOpen = false;
      void this.startResync(fresh ? 'fresh session' : 'a new process continues the session');
    }
  }

  /** Frames reached the socket: a written `stream.end` may let a queued snapshot start. */
  wrote(written: readonly { item: OutItem; seq: number }[]): void {
    for (const w of written) {
      w.item.onWritten?.(w.seq);
      if (w.item.type !== 'stream.end') continue;
      this.host.log.info('observed resync written', { seq: w.seq, ...(w.item.payload as object) });
      if (this.resyncQueued && !this.host.outbox.resyncInProgress) {
        this.resyncQueued = false;
        void this.startResync('requested during the previous resync');
      }
    }
  }

  /** The counters changed (a handler failure, a queue loss): report them, at most once per interval. */
  scheduleStats(): void {
    if (this.cancelStats) return;
    const due = this.host.linkStats.dueIn(this.linkCounters(), this.host.timers.now());
    if (due === null) return;
    this.cancelStats = this.host.timers.schedule(() => {
      this.cancelStats = null;
      // Between sessions the next welcome sends a fresh report anyway.
      if (!this.host.open()) return;
      this.enqueue(outItem('link.stats', this.host.linkStats.take(this.linkCounters(), this.host.timers.now())));
    }, due);
  }

  dispose(): void {
    this.cancelStats?.();
    this.cancelReobserve?.();
    this.cancelReobserve = null;
  }

  private linkCounters(): LinkCounters {
    return { ...this.host.outbox.counters, handlerFailures: this.host.counters.handlerFailures };
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

  private async startResync(reason: string): Promise<void> {
    const h = this.host;
    if (h.outbox.resyncInProgress) {
      // Superseding a stream midway would leave the hub a begin without an end: run after it.
      this.resyncQueued = true;
      return;
    }
    const sessionGen = h.sessionGen();
    let snapshot: ObservedSnapshot;
    try {
      snapshot = await h.snapshot();
    } catch (err) {
      h.log.error('taking the observed snapshot failed; resync retried after the next welcome', { err, reason });
      this.resyncAfterOpen = true;
      return;
    }
    if (sessionGen !== h.sessionGen() || h.stopping()) return;
    const stream = new ObservedResync(snapshot, () => newId(h.timers.now()));
    if (stream.problems.length > 0) {
      const problems = stream.problems.slice(0, 10);
      h.log.error('observed snapshot has invalid objects: the stream will be marked incomplete', { problems });
    }
    h.log.info('streaming observed resync', { reason, begin: stream.beginId, scope: stream.scope });
    h.counters.resyncsSent++;
    h.outbox.startResync(stream);
    h.requestPump();
  }
}
