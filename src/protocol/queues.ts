/**
 * Send queues. Neither assigns sequence numbers: a frame is numbered when it is written, so a
 * queue may replace and evict without leaving holes.
 */
import type { QueueClass } from './catalog';

export interface Queued<T> {
  value: T;
  class: QueueClass;
  /** Coalescing key for `state` frames. */
  key: string | null;
}

export type PushOutcome =
  /** Appended at the tail. */
  | 'appended'
  /** Full: took the place of the oldest queued frame with the same key. */
  | 'replaced'
  /** Full: an event, dropped from the tail and counted. */
  | 'dropped_event'
  /** Full: the oldest evictable frame made room and was counted as a drop. */
  | 'evicted_oldest'
  /** Full of control frames: this state frame is the one lost, counted as evicted. */
  | 'dropped_state'
  /** Full and nothing evictable (all control frames): the caller must push back. */
  | 'rejected';

export interface OperatorQueueCounters {
  droppedEvents: number;
  evictedFrames: number;
  replacedFrames: number;
}

interface Node<T> {
  item: Queued<T>;
  prev: Node<T> | null;
  next: Node<T> | null;
}

/**
 * The operator's send queue. Observed state is a snapshot of the present, so when full the
 * oldest frame with the same key is replaced (and any younger ones with that key, which the new
 * frame supersedes, are removed). Events are dropped from the tail and counted. Otherwise the
 * oldest evictable frame is evicted and counted. Control frames (resync framing, errors,
 * operations) are never replaced or evicted: losing one would corrupt a stream or an
 * operation's conclusion; they may exceed capacity by `controlReserve`.
 */
export class OperatorSendQueue<T> {
  private head: Node<T> | null = null;
  private tail: Node<T> | null = null;
  private size = 0;
  /** Nodes per coalescing key, oldest first. */
  private readonly byKey = new Map<string, Node<T>[]>();
  readonly counters: OperatorQueueCounters = { droppedEvents: 0, evictedFrames: 0, replacedFrames: 0 };

  constructor(
    readonly capacity: number,
    readonly controlReserve = Math.max(16, Math.ceil(capacity / 4)),
    /** Told of each state frame lost outright (evicted, or refused for want of room): no newer frame of its subject took its place. */
    private readonly lost: (item: Queued<T>) => void = () => {},
  ) {
    if (capacity < 1) throw new RangeError('capacity must be at least 1');
  }

  get length(): number {
    return this.size;
  }

  push(item: Queued<T>): PushOutcome {
    if (this.size < this.capacity) {
      this.append(item);
      return 'appended';
    }
    if (item.class === 'state' && item.key !== null) {
      const same = this.byKey.get(item.key);
      if (same && same.length > 0) {
        const oldest = same[0] as Node<T>;
        // Younger frames of the same key are superseded too; keeping them would send stale state last.
        for (const n of same.slice(1)) {
          this.unlink(n);
          this.counters.replacedFrames++;
        }
        this.byKey.set(item.key, [oldest]);
        oldest.item = item;
        this.counters.replacedFrames++;
        return 'replaced';
      }
    }
    if (item.class === 'event') {
      this.counters.droppedEvents++;
      return 'dropped_event';
    }
    const victim = this.oldestEvictable();
    if (victim) {
      this.unlink(victim);
      if (victim.item.class === 'event') this.counters.droppedEvents++;
      else {
        this.counters.evictedFrames++;
        this.lost(victim.item);
      }
      this.append(item);
      return 'evicted_oldest';
    }
    if (item.class === 'control' && this.size < this.capacity + this.controlReserve) {
      this.append(item);
      return 'appended';
    }
    if (item.class === 'state') {
      // Nothing evictable ahead of it: this state frame is the one to lose.
      this.counters.evictedFrames++;
      this.lost(item);
      return 'dropped_state';
    }
    return 'rejected';
  }

  /** Whether a state frame with this coalescing key is waiting. */
  hasKey(key: string): boolean {
    return (this.byKey.get(key)?.length ?? 0) > 0;
  }

  /** Take the oldest frame for writing. */
  shift(): T | undefined {
    const n = this.head;
    if (!n) return undefined;
    this.unlink(n);
    return n.item.value;
  }

  /**
   * Take the oldest frame that is not `held` (frames held back for now keep their places and
   * their order). Returns undefined when every queued frame is held.
   */
  shiftFirst(held: (value: T, cls: QueueClass) => boolean): T | undefined {
    for (let n = this.head; n; n = n.next) {
      if (held(n.item.value, n.item.class)) continue;
      this.unlink(n);
      return n.item.value;
    }
    return undefined;
  }

  /**
   * Remove the state frames `superseded` names (a snapshot newer than them is about to go out),
   * counted as replaced. Returns how many.
   */
  supersede(superseded: (value: T, key: string) => boolean): number {
    let removed = 0;
    for (let n = this.head; n; ) {
      const next = n.next;
      if (n.item.class === 'state' && n.item.key !== null && superseded(n.item.value, n.item.key)) {
        this.unlink(n);
        this.counters.replacedFrames++;
        removed++;
      }
      n = next;
    }
    return removed;
  }

  /** Drop everything (a fresh session supersedes what was queued under the old numbering). */
  clear(): void {
    this.head = this.tail = null;
    this.size = 0;
    this.byKey.clear();
  }

  *values(): IterableIterator<T> {
    for (let n = this.head; n; n = n.next) yield n.item.value;
  }

  private append(item: Queued<T>): void {
    const n: Node<T> = { item, prev: this.tail, next: null };
    if (this.tail) this.tail.next = n;
    else this.head = n;
    this.tail = n;
    this.size++;
    if (item.class === 'state' && item.key !== null) {
      const list = this.byKey.get(item.key);
      if (list) list.push(n);
      else this.byKey.set(item.key, [n]);
    }
  }

  private unlink(n: Node<T>): void {
    if (n.prev) n.prev.next = n.next;
    else this.head = n.next;
    if (n.next) n.next.prev = n.prev;
    else this.tail = n.prev;
    n.prev = n.next = null;
    this.size--;
    const key = n.item.key;
    if (n.item.class === 'state' && key !== null) {
      const list = this.byKey.get(key);
      if (list) {
        const i = list.indexOf(n);
        if (i >= 0) list.splice(i, 1);
        if (list.length === 0) this.byKey.delete(key);
      }
    }
  }

  private oldestEvictable(): Node<T> | null {
    for (let n = this.head; n; n = n.next) if (n.item.class !== 'control') return n;
    return null;
  }
}

/**
 * The hub's send queue: desired state must not be dropped, so it never replaces or evicts.
 * When full it says so and the hub closes the connection (4429) and lets resume sort it out.
 */
export class HubSendQueue<T> {
  private items: { value: T; bytes: number }[] = [];
  private head = 0;
  private totalBytes = 0;

  constructor(
    readonly maxFrames: number,
    readonly maxBytes: number,
  ) {}

  get length(): number {
    return this.items.length - this.head;
  }

  get bytes(): number {
    return this.totalBytes;
  }

  /** False when the frame does not fit: the connection must be closed, nothing is dropped. */
  push(value: T, bytes: number): boolean {
    if (this.length + 1 > this.maxFrames || this.totalBytes + bytes > this.maxBytes) return false;
    this.items.push({ value, bytes });
    this.totalBytes += bytes;
    return true;
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const e = this.items[this.head++] as { value: T; bytes: number };
    this.totalBytes -= e.bytes;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return e.value;
  }

  peek(): T | undefined {
    return this.items[this.head]?.value;
  }

  clear(): void {
    this.items = [];
    this.head = 0;
    this.totalBytes = 0;
  }
}
