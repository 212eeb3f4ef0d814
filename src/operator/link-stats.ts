import type { OperatorQueueCounters, Payload } from '../protocol';

/**
 * When to tell the hub about the send queue's drop counters (`link.stats`). The counters are
 * cumulative for this process run, identified by `epoch`; the frame is a coalesced snapshot, so
 * only the latest value matters. Sent once after every session opens, then whenever a counter
 * changed, at most once per `minIntervalMs`.
 */
export class LinkStatsReporter {
  private last: OperatorQueueCounters | null = null;
  private lastAt = -Infinity;

  constructor(
    readonly epoch: string,
    readonly minIntervalMs = 5_000,
  ) {}

  /** A session opened: the hub's view starts empty, so the next report is due at once. */
  sessionOpened(): void {
    this.last = null;
    this.lastAt = -Infinity;
  }

  /** Milliseconds until a report is due (0: now), or null when nothing changed since the last one. */
  dueIn(counters: OperatorQueueCounters, now: number): number | null {
    if (this.last && sameCounters(this.last, counters)) return null;
    return Math.max(0, this.lastAt + this.minIntervalMs - now);
  }

  /** The payload to send now; records it as reported. */
  take(counters: OperatorQueueCounters, now: number): Payload<'link.stats'> {
    this.last = { ...counters };
    this.lastAt = now;
    return {
      epoch: this.epoch,
      dropped_events: counters.droppedEvents,
      evicted_frames: counters.evictedFrames,
      replaced_frames: counters.replacedFrames,
    };
  }
}

function sameCounters(a: OperatorQueueCounters, b: OperatorQueueCounters): boolean {
  return a.droppedEvents === b.droppedEvents && a.evictedFrames === b.evictedFrames && a.replacedFrames === b.replacedFrames;
}
