/**
 * Everything waiting to be written, in the order the writer takes it:
 * 1. a frame the writer took and had to put back (the window was full);
 * 2. the observed resync stream in progress, so a snapshot goes out whole and in order;
 * 3. the coalescing send queue from the protocol core (replace same-key state, drop events from
 *    the tail, evict the oldest; every loss counted for `link.stats`).
 *
 * While the application's `snapshot()` is being taken, a state frame queued after it was asked for
 * waits at the head of the queue (`holdReports`): the snapshot lists the state at some moment
 * inside that call, so such a report may be newer than the snapshot and must reach the hub after
 * the stream, never before it (where the snapshot would overwrite or prune it). One queued before
 * it was asked for is older than the snapshot, which supersedes it (`startResync`).
 *
 * Bounded: state and event frames by the queue's capacity (what happens at it is the queue's
 * policy above). Control frames (error replies, operation reports) are never replaced or
 * evicted, so they have a bound of their own, `controlLimit` frames waiting at once: the queue
 * holds them up to its control reserve, the rest wait in a FIFO overflow, and a push past the
 * limit is refused ('rejected'). Callers keep out of that refusal: the client applies no hub frame
 * (whose answer would be a control frame) while fewer than `REPLY_RESERVE` control slots are
 * free, and operation reports leave those slots to replies (see `hasRoom`).
 */
import { OperatorSendQueue, queueClassOf, type OperatorQueueCounters, type PushOutcome } from '../protocol';
import { queueing, type OutItem } from './outgoing';
import type { ObservedResync } from './resync';

/**
 * Control slots kept for the answer to the hub frame being applied: inbound frames are applied
 * one at a time and each produces at most one control frame (an `error` or `operation.accepted`).
 * Operation starts waiting for a shared save owe theirs on top (`canApply(owed)`).
 */
export const REPLY_RESERVE = 2;

export class Outbox {
  private readonly queue: OperatorSendQueue<OutItem>;
  private overflow: OutItem[] = [];
  private held: OutItem | null = null;
  /**
   * The latest `link.stats`, waiting: one slot of its own, outside the queue. In the queue it was
   * a state frame like any other: under backpressure each report replaced the last one (counted
   * as replaced, so the counters counted their own reports) or evicted an application frame.
   */
  private stats: OutItem | null = null;
  /** The last frame a stream handed out: a put-back frame that is it belongs to a stream. */
  private lastFromStream: OutItem | null = null;
  private stream: ObservedResync | null = null;
  /** Control frames waiting in the queue, the overflow and `held` (not the resync stream's). */
  private control = 0;
  /** While a snapshot is being taken: the frames pushed since it was asked for (see the header). */
  private pushedDuringSnapshot: WeakSet<OutItem> | null = null;
  /**
   * Removals the full queue lost outright, by coalescing key, until a snapshot newer than them
   * is streamed (`startResync`). The snapshot that follows an eviction observes an evicted
   * `.observed` frame again, but a removal only by leaving its subject out of a stream that ends
   * complete, and one object the catalog refuses makes every snapshot incomplete: the hub would
   * keep the subject for good. At most `capacity` (the oldest forgotten first).
   */
  private readonly lostRemovals = new Map<string, OutItem>();
  /** A graceful stop: no snapshot will come, so the lost removals follow the queue (`sendLostRemovals`). */
  private lostRemovalsFollow = false;

  constructor(
    capacity: number,
    readonly controlLimit = capacity,
  ) {
    if (!(controlLimit > REPLY_RESERVE)) throw new RangeError(`controlLimit must exceed ${REPLY_RESERVE}`);
    this.queue = new OperatorSendQueue<OutItem>(capacity, undefined, (lost) => {
      if (lost.key === null || !lost.value.type.endsWith('.removed')) return;
      this.lostRemovals.delete(lost.key);
      if (this.lostRemovals.size >= capacity) {
        const oldest = this.lostRemovals.keys().next().value;
        if (oldest !== undefined) this.lostRemovals.delete(oldest);
      }
      this.lostRemovals.set(lost.key, lost.value);
    });
  }

  get counters(): OperatorQueueCounters {
    return { ...this.queue.counters };
  }

  /** Events sent but never acknowledged under a session the hub replaced: lost, and counted as dropped. */
  countLostEvents(n: number): void {
    this.queue.counters.droppedEvents += n;
  }

  /** Frames waiting (not counting the unwritten rest of a resync stream). */
  get length(): number {
    return this.queue.length + this.overflow.length + (this.held ? 1 : 0) + (this.stats ? 1 : 0);
  }

  /** Control frames waiting. */
  get controlWaiting(): number {
    return this.control;
  }

  /**
   * Whether a control frame may be queued now. `reply`: the answer to the hub frame being
   * applied, which may use the reserved slots; anything else leaves them free.
   */
  hasRoom(reply = false): boolean {
    return this.control < this.controlLimit - (reply ? 0 : REPLY_RESERVE);
  }

  /**
   * Whether a hub frame may be applied now: at least `REPLY_RESERVE` control slots are free, one
   * for its answer and one for a resync frame the writer may put back meanwhile (`putBack` counts
   * it). With one slot free the answer could be refused, and lost, after its frame was applied.
   * `owed`: answers of frames already applied and not yet queued (starts waiting for their save).
   */
  canApply(owed = 0): boolean {
    return this.controlLimit - this.control >= REPLY_RESERVE + owed;
  }

  get resyncInProgress(): ObservedResync | null {
    return this.stream && !this.stream.done ? this.stream : null;
  }

  get empty(): boolean {
    return this.length === 0 && this.resyncInProgress === null && !(this.lostRemovalsFollow && this.lostRemovals.size > 0);
  }

  /**
   * A graceful stop begins: the snapshot a lost removal waits for is never taken in this process,
   * and the next one's shows a removal only when it ends complete, so the removals go out after
   * the queue, in the drain (which waits for them). Each is still the last word on its subject: a
   * newer report of it took it out of the map. Those lost during the drain follow the same way.
   */
  sendLostRemovals(): void {
    this.lostRemovalsFollow = true;
  }

  push(item: OutItem): PushOutcome {
    if (item.type === 'link.stats') {
      // Counters are cumulative: the newest report says all the older one did.
      this.stats = item;
      return 'appended';
    }
    const q = queueing(item);
    if (q.class === 'control') {
      if (this.control >= this.controlLimit) return 'rejected';
      this.control++;
      // Behind frames already overflowing, so control frames keep their order.
      const outcome = this.overflow.length > 0 ? 'rejected' : this.queue.push({ value: item, class: 'control', key: null });
      if (outcome === 'rejected') {
        this.overflow.push(item);
        return 'appended';
      }
      // 'evicted_oldest': the control frame took an older state or event frame's place. The caller
      // must hear of that loss, or its count never reaches the hub in link.stats.
      return outcome;
    }
    this.pushedDuringSnapshot?.add(item);
    // A newer statement of the subject: a removal lost before it is no longer the last word.
    if (q.key !== null) this.lostRemovals.delete(q.key);
    return this.queue.push({ value: item, class: q.class, key: q.key });
  }

  /** A snapshot is being asked for: state frames pushed from now on wait until `releaseReports`. */
  holdReports(): void {
    this.pushedDuringSnapshot = new WeakSet();
  }

  /** The snapshot was taken (its stream now goes first) or will not be streamed: the queue flows. */
  releaseReports(): void {
    this.pushedDuringSnapshot = null;
  }

  /**
   * Whether a state frame for this subject (its coalescing key) waits to be written: in the queue,
   * or taken and put back for want of room in the window (it is written first).
   */
  hasQueued(item: OutItem): boolean {
    const key = queueing(item).key;
    if (key === null) return false;
    return this.queue.hasKey(key) || (this.held !== null && queueing(this.held).key === key);
  }

  /**
   * Start streaming a snapshot; one already in progress is abandoned (the new one supersedes it).
   * The stream goes out before the queue, so a state frame queued before the snapshot was asked
   * for would follow it while being older: an observed frame would bring back a subject the
   * snapshot left out (pruned by then), a removal would delete one it lists. Those are dropped
   * (counted as replaced). A removal of a subject the snapshot leaves out stays: an incomplete
   * snapshot prunes nothing, so only the removal takes the subject away at the hub. Returns how
   * many were dropped.
   */
  startResync(stream: ObservedResync): number {
    this.stream = stream;
    const during = this.pushedDuringSnapshot;
    const scope = new Set<string>(stream.scope);
    const members = stream.memberKeys();
    const superseded = this.queue.supersede((item, key) => {
      if (during?.has(item)) return false;
      const [kind, what] = item.type.split('.') as [string, string];
      if (!scope.has(kind)) return false;
      return what === 'observed' || members.has(key);
    });
    // A removal the queue lost before the snapshot was asked for follows the stream, like one
    // still queued, unless the snapshot lists its subject. One lost while it was taken is newer
    // than it: the snapshot its eviction asked for decides. (Taken first: one lost again by the
    // push waits for that next snapshot, not for this loop.)
    for (const [key, item] of [...this.lostRemovals]) {
      const [kind] = item.type.split('.') as [string];
      if (during?.has(item) || !scope.has(kind)) continue;
      this.lostRemovals.delete(key);
      if (!members.has(key) && !this.queue.hasKey(key)) this.queue.push({ value: item, class: 'state', key });
    }
    return superseded;
  }

  /** A fresh session: a stream numbered under the old session must not continue in the new one. */
  dropResync(): void {
    const old = this.stream;
    this.stream = null;
    // Any stream's frame waiting to be written, not only the current stream's: a stream whose end
    // waits for the window counts as finished, and a later one may have replaced it meanwhile.
    const held = this.held;
    if (held && (held === this.lastFromStream || (old && (held.id === old.beginId || held.replyTo === old.beginId)))) {
      if (isControl(held)) this.control--;
      this.held = null;
    }
    this.lastFromStream = null;
  }

  next(): OutItem | null {
    if (this.held) {
      const h = this.held;
      this.held = null;
      if (isControl(h)) this.control--;
      return h;
    }
    const fromStream = this.stream?.next() ?? null;
    if (fromStream) {
      this.lastFromStream = fromStream;
      return fromStream;
    }
    if (this.stats) {
      const st = this.stats;
      this.stats = null;
      return st;
    }
    // State reported while the snapshot is taken waits for its stream; nothing else waits with it.
    // An answer owed to the hub (an operation's, an error for a frame it sent) is no part of the
    // snapshot's order, and held behind such a report it went out only when the application's
    // snapshot() returned: an operation started meanwhile was not answered by its deadline.
    const during = this.pushedDuringSnapshot;
    const item = (during === null ? this.queue.shift() : this.queue.shiftFirst((v, cls) => cls === 'state' && during.has(v))) ?? null;
    if (item && isControl(item)) this.control--;
    this.refill();
    // After the queue, not after what it holds back for the stream (still queued).
    if (item === null && this.lostRemovalsFollow && this.queue.length === 0) {
      for (const [key, removal] of this.lostRemovals) {
        this.lostRemovals.delete(key);
        return removal;
      }
    }
    return item;
  }

  /** Give back the frame `next()` returned: it is the first out next time. */
  putBack(item: OutItem): void {
    this.held = item;
    if (isControl(item)) this.control++;
  }

  /** Report to the stream what happened to one of its frames. */
  wrote(item: OutItem): void {
    this.stream?.wrote(item);
  }

  skipped(item: OutItem, reason: string): void {
    this.stream?.skipped(item, reason);
  }

  private refill(): void {
    while (this.overflow.length > 0) {
      const next = this.overflow[0] as OutItem;
      if (this.queue.push({ value: next, class: 'control', key: null }) === 'rejected') return;
      this.overflow.shift();
    }
  }
}

function isControl(item: OutItem): boolean {
  return queueClassOf(item.type) === 'control';
}
