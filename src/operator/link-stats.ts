import type { OperatorQueueCounters, Payload } from '../protocol';

/** What `link.stats` reports: the send queue's losses and the handlers' transient failures. */
export interface LinkCounters extends OperatorQueueCounters {
  handlerFailures: number;
  /** `operation.progress` reports dropped for want of room in the send queue. */
  droppedProgress: number;
}

/**
 * When to tell the hub about the link's counters (`link.stats`). The counters are cumulative for
 * this process run, identified by `epoch`; the frame is a coalesced snapshot, so only the latest
 * value matters. Sent once after every session opens, then whenever a counter changed, at most
 * once per `minIntervalMs`. Its `now` is monotonic (`elapsed`): the interval is a duration, and a
 * wall clock stepped back would hold a report for as long as the step.
 */
export class LinkStatsReporter {
  private last: LinkCounters | null = null;
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
  dueIn(counters: LinkCounters, now: number): number | null {
    if (this.last && sameCounters(this.last, counters)) return null;
    return Math.max(0, this.lastAt + this.minIntervalMs - now);
  }

  /** The payload to send now; records it as reported. */
  take(counters: LinkCounters, now: number): Payload<'link.stats'> {
    this.last = { ...counters };
    this.lastAt = now;
    return {
      epoch: this.epoch,
      dropped_events: counters.droppedEvents,
      evicted_frames: counters.evictedFrames,
      replaced_frames: counters.replacedFrames,
      handler_failures: counters.handlerFailures,
      dropped_progress: counters.droppedProgress,
    };
  }
}

function sameCounters(a: LinkCounters, b: LinkCounters): boolean {
  return (
    a.droppedEvents === b.droppedEvents &&
    a.evictedFrames === b.evictedFrames &&
    a.replacedFrames === b.replacedFrames &&
    a.handlerFailures === b.handlerFailures &&
    a.droppedProgress === b.droppedProgress
  );
}
