/**
 * Everything waiting to be written, in the order the writer takes it:
 * 1. a frame the writer took and had to put back (the window was full);
 * 2. the observed resync stream in progress, so a snapshot goes out whole and in order;
 * 3. the coalescing send queue from the protocol core (replace same-key state, drop events from
 *    the tail, evict the oldest; every loss counted for `link.stats`).
 * Control frames the queue refuses (its control reserve is exhausted) wait in a FIFO overflow
 * instead of being lost: an operation's conclusion or an error reply must not vanish.
 */
import { OperatorSendQueue, type OperatorQueueCounters, type PushOutcome } from '../protocol';
import { queueing, type OutItem } from './outgoing';
import type { ObservedResync } from './resync';

export class Outbox {
  private readonly queue: OperatorSendQueue<OutItem>;
  private overflow: OutItem[] = [];
  private held: OutItem | null = null;
  private stream: ObservedResync | null = null;

  constructor(capacity: number) {
    this.queue = new OperatorSendQueue<OutItem>(capacity);
  }

  get counters(): OperatorQueueCounters {
    return { ...this.queue.counters };
  }

  /** Frames waiting (not counting the unwritten rest of a resync stream). */
  get length(): number {
    return this.queue.length + this.overflow.length + (this.held ? 1 : 0);
  }

  get resyncInProgress(): ObservedResync | null {
    return this.stream && !this.stream.done ? this.stream : null;
  }

  get empty(): boolean {
    return this.length === 0 && this.resyncInProgress === null;
  }

  push(item: OutItem): PushOutcome {
    const q = queueing(item);
    if (q.class === 'control' && this.overflow.length > 0) {
      this.overflow.push(item);
      return 'appended';
    }
    const outcome = this.queue.push({ value: item, class: q.class, key: q.key });
    if (outcome === 'rejected') {
      this.overflow.push(item);
      return 'appended';
    }
    return outcome;
  }

  /** Start streaming a snapshot; one already in progress is abandoned (the new one supersedes it). */
  startResync(stream: ObservedResync): void {
    this.stream = stream;
  }

  /** A fresh session: a stream numbered under the old session must not continue in the new one. */
  dropResync(): void {
    const old = this.stream;
    this.stream = null;
    if (old && this.held && (this.held.id === old.beginId || this.held.replyTo === old.beginId)) this.held = null;
  }

  next(): OutItem | null {
    if (this.held) {
      const h = this.held;
      this.held = null;
      return h;
    }
    const fromStream = this.stream?.next() ?? null;
    if (fromStream) return fromStream;
    const item = this.queue.shift() ?? null;
    this.refill();
    return item;
  }

  /** Give back the frame `next()` returned: it is the first out next time. */
  putBack(item: OutItem): void {
    this.held = item;
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
