/**
 * The sequencing engine shared by the hub and the operator SDK. Pure: no I/O, no clocks, no
 * timers. The replay buffer's storage is behind `ReplayStore` so the hub can keep it in its
 * object's SQLite and the SDK in memory or on disk.
 */

export interface ReplayEntry {
  seq: number;
  /** The frame exactly as sent; a replay re-sends it with its original id and seq. */
  frame: string;
  bytes: number;
}

export interface ReplayStore {
  append(entry: ReplayEntry): void;
  /** Drop every entry with seq ≤ `through`. */
  releaseThrough(through: number): void;
  /** Remove and return the oldest entry. */
  shiftOldest(): ReplayEntry | undefined;
  /** Entries with seq > `after`, ascending. */
  entriesAfter(after: number): ReplayEntry[];
  clear(): void;
  readonly frames: number;
  readonly bytes: number;
}

/** An in-memory replay buffer. */
export class MemoryReplayStore implements ReplayStore {
  private entries: ReplayEntry[] = [];
  private head = 0;
  private totalBytes = 0;

  append(entry: ReplayEntry): void {
    this.entries.push(entry);
    this.totalBytes += entry.bytes;
  }

  releaseThrough(through: number): void {
    while (this.head < this.entries.length && (this.entries[this.head] as ReplayEntry).seq <= through) {
      this.totalBytes -= (this.entries[this.head] as ReplayEntry).bytes;
      this.head++;
    }
    this.compact();
  }

  shiftOldest(): ReplayEntry | undefined {
    if (this.head >= this.entries.length) return undefined;
    const e = this.entries[this.head++] as ReplayEntry;
    this.totalBytes -= e.bytes;
    this.compact();
    return e;
  }

  entriesAfter(after: number): ReplayEntry[] {
    const out: ReplayEntry[] = [];
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i] as ReplayEntry;
      if (e.seq > after) out.push(e);
    }
    return out;
  }

  clear(): void {
    this.entries = [];
    this.head = 0;
    this.totalBytes = 0;
  }

  get frames(): number {
    return this.entries.length - this.head;
  }

  get bytes(): number {
    return this.totalBytes;
  }

  // Amortized O(1) release without shifting the array on every ack.
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }
}

export interface ReplayLimits {
  frames: number;
  bytes: number;
}

/** The numbers an outbound stream must persist to survive a restart of its holder. */
export interface OutboundState {
  /** The seq the next sequenced frame gets. */
  nextSeq: number;
  /** The highest seq the peer has acknowledged (released from the buffer). */
  peerAck: number;
  /** The highest seq pushed out of the buffer unacknowledged (overflow); a resume below it is impossible. */
  lostThrough: number;
}

export type ResumePlan =
  | { ok: true; replay: ReplayEntry[] }
  | { ok: false; reason: 'ahead_of_sent' | 'left_buffer' | 'behind_release' };

export type AckOutcome = 'advanced' | 'stale' | 'invalid';

/**
 * Outbound numbering and the replay buffer. Sequence numbers are assigned when a frame is
 * written, never when it is queued, so queues may replace and evict freely.
 */
export class OutboundSequencer {
  private state: OutboundState;

  constructor(
    readonly store: ReplayStore,
    readonly limits: ReplayLimits,
    state: OutboundState = { nextSeq: 1, peerAck: 0, lostThrough: 0 },
  ) {
    this.state = { ...state };
  }

  snapshot(): OutboundState {
    return { ...this.state };
  }

  get nextSeq(): number {
    return this.state.nextSeq;
  }

  get lastSent(): number {
    return this.state.nextSeq - 1;
  }

  get peerAck(): number {
    return this.state.peerAck;
  }

  get lostThrough(): number {
    return this.state.lostThrough;
  }

  /** Frames sent and not yet acknowledged that the buffer still holds. */
  get unacked(): number {
    return this.store.frames;
  }

  /**
   * Number a frame and keep it for replay. `build` receives the seq and returns the frame text.
   * When the buffer is over its bounds the oldest frames leave it and the next resume from
   * before them must be a full resync: never a silent loss. The frame just numbered always stays,
   * even alone over the byte bound: it is about to be sent, and a frame sent from no buffer
   * could only ever be recovered by a full resync.
   */
  stamp(build: (seq: number) => string): { seq: number; frame: string; overflowed: number } {
    const seq = this.state.nextSeq++;
    const frame = build(seq);
    const bytes = utf8Length(frame);
    this.store.append({ seq, frame, bytes });
    let overflowed = 0;
    while (this.store.frames > this.limits.frames || (this.store.frames > 1 && this.store.bytes > this.limits.bytes)) {
      const gone = this.store.shiftOldest();
      if (!gone) break;
      this.state.lostThrough = Math.max(this.state.lostThrough, gone.seq);
      overflowed++;
    }
    return { seq, frame, overflowed };
  }

  /** Apply the peer's cumulative ack. An ack beyond what was sent is a protocol violation. */
  acknowledge(ack: number): AckOutcome {
    if (ack > this.lastSent) return 'invalid';
    if (ack <= this.state.peerAck) return 'stale';
    this.state.peerAck = ack;
    this.store.releaseThrough(ack);
    return 'advanced';
  }

  /**
   * Whether the peer can resume from `resumeFrom` (its highest contiguous processed seq), and
   * if so which frames to re-send right after the welcome.
   */
  /** Why a resume from this point is impossible, or null when it is possible. Changes nothing. */
  resumeProblem(resumeFrom: number): Exclude<ResumePlan, { ok: true }>['reason'] | null {
    if (resumeFrom > this.lastSent) return 'ahead_of_sent';
    if (resumeFrom < this.state.lostThrough) return 'left_buffer';
    // The peer once acked past this point and has since forgotten it: those frames are released.
    if (resumeFrom < this.state.peerAck) return 'behind_release';
    return null;
  }

  planResume(resumeFrom: number): ResumePlan {
    const problem = this.resumeProblem(resumeFrom);
    if (problem !== null) return { ok: false, reason: problem };
    this.acknowledge(resumeFrom);
    return { ok: true, replay: this.store.entriesAfter(resumeFrom) };
  }

  /** A fresh session: numbering restarts at 1 and the buffer is discarded. */
  reset(): void {
    this.state = { nextSeq: 1, peerAck: 0, lostThrough: 0 };
    this.store.clear();
  }
}

export type Arrival = 'accept' | 'duplicate' | 'gap';
export type Settlement = 'applied' | 'dropped' | 'failed';

/**
 * Inbound sequencing: the arrival expectation and the contiguous applied cursor are two
 * different numbers. Reading continues past a failed frame, but the cursor never passes it.
 */
export class InboundSequencer {
  private cursorSeq: number;
  private expectedSeq: number;
  /** Settled (applied or dropped) above the cursor, waiting for a hole below them to close. */
  private readonly done = new Set<number>();
  /** Failed (transient) above the cursor: holes. */
  private readonly failed = new Set<number>();

  constructor(cursor = 0) {
    this.cursorSeq = cursor;
    this.expectedSeq = cursor + 1;
  }

  /** Highest contiguous seq durably processed: what `ack` carries. */
  get cursor(): number {
    return this.cursorSeq;
  }

  /** The seq the next sequenced frame must carry. */
  get expected(): number {
    return this.expectedSeq;
  }

  /** Accepted but neither settled nor failed yet. */
  get inFlight(): number {
    return this.expectedSeq - 1 - this.cursorSeq - this.done.size - this.failed.size;
  }

  get holes(): number[] {
    return [...this.failed].sort((a, b) => a - b);
  }

  /** Strict order: a duplicate is dropped, a gap closes the connection. */
  arrive(seq: number): Arrival {
    if (seq < this.expectedSeq) return 'duplicate';
    if (seq > this.expectedSeq) return 'gap';
    this.expectedSeq++;
    return 'accept';
  }

  /**
   * Record how an accepted frame ended. `dropped` (unknown type, poison) counts like applied:
   * the seq is consumed and acknowledged. `failed` leaves a hole until settled again.
   * Returns true when the cursor moved.
   */
  settle(seq: number, outcome: Settlement): boolean {
    if (seq <= this.cursorSeq || seq >= this.expectedSeq) return false;
    if (outcome === 'failed') {
      if (!this.done.has(seq)) this.failed.add(seq);
      return false;
    }
    this.failed.delete(seq);
    this.done.add(seq);
    const before = this.cursorSeq;
    while (this.done.delete(this.cursorSeq + 1)) this.cursorSeq++;
    return this.cursorSeq !== before;
  }

  /**
   * The peer is about to replay from cursor + 1: expect exactly that, or the replay would read as
   * duplicates and the cursor would never move again.
   */
  rewind(): void {
    this.expectedSeq = this.cursorSeq + 1;
    this.done.clear();
    this.failed.clear();
  }

  /** A fresh session: numbering restarts at 1. */
  reset(): void {
    this.cursorSeq = 0;
    this.rewind();
  }
}

/** UTF-8 byte length without allocating (TextEncoder would copy the whole frame). */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}
