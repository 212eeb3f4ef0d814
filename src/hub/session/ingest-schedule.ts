/**
 * Which accepted frames the next ingest statement carries, and what a failure does to that
 * choice. Pure (no clock of its own, no I/O): the pipeline drives it, and a property test drives
 * it through random failures.
 *
 * Reading does not stop at a hole: when a statement fails transiently in a way one frame can
 * cause (a row lock, a statement timeout, a serialization failure), the batch is split until the
 * failing frame stands alone; that frame's subject is then held (retried with backoff) and every
 * other frame goes on being applied. Order is kept where it matters:
 * - per subject: a frame never applies before an earlier frame about the same node, GPU,
 *   deployment, operation… (a later statement must never be overwritten by an older one);
 * - at a resync boundary (`resync.begin`, `stream.end`): it applies only after every frame before
 *   it, and nothing after it applies before it (a prune must see the whole stream, and the
 *   stream's count only the frames inside it).
 * The contiguous cursor stays behind the first unapplied frame (the sequencer's rule), so the ack
 * never passes a hole. A second statement may be in flight behind the first (`behind`); the same
 * rules hold whichever of the two fails.
 */
import type { InboundItem } from './ingest-batch';

/** How a failed statement failed. */
export type FailureKind =
  /** Could be one frame's doing (lock, timeout, serialization): split and isolate. */
  | 'isolatable'
  /** The database is unreachable or failing as a whole: retry the same frames after a backoff. */
  | 'global'
  /** The data itself (SQLSTATE 21/22/23/54): split until the refused frame is alone. */
  | 'permanent';

export interface ScheduleLimits {
  maxBatch: number;
  /**
   * Most frame bytes one statement carries (always at least one frame). Each table's rows travel
   * as one jsonb parameter, which Postgres caps at 256 MiB (54000), and JSON text in V8 at about
   * 512 MiB: frames at the size limit could otherwise fill a statement no retry could ever send.
   */
  maxBytes: number;
  /** Subjects held at once before isolation gives up and the whole backlog waits. */
  maxHeld: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_SCHEDULE_LIMITS: ScheduleLimits = { maxBatch: 2_000, maxBytes: 16 << 20, maxHeld: 8, baseDelayMs: 50, maxDelayMs: 2_000 };

/** The ordering key of a frame, or null when it may apply in any order (events, rejections). */
export function subjectOf(item: InboundItem): string | null {
  if (item.kind !== 'message') return null;
  const m = item.message;
  switch (m.type) {
    case 'cluster.observed':
      return 'cluster';
    case 'node.observed':
    case 'node.removed':
      return `node:${m.payload.node_id}`;
    case 'device.observed':
    case 'device.removed':
      return `device:${m.payload.device_id}`;
    case 'deployment.observed':
    case 'deployment.removed':
      return `deployment:${m.payload.deployment_id}`;
    case 'link.stats':
      return 'link';
    // One key for every operation frame and every error that answers a frame: an error names
    // the operation.start it answers only by that frame's id, which the session cannot map back
    // to its operation here. Applied in seq order, the first concluding frame (an error or a
    // result) is the one that concludes. They are few, so the lost parallelism costs nothing.
    case 'operation.accepted':
    case 'operation.progress':
    case 'operation.result':
      return 'operations';
    case 'error':
      return item.replyTo === null ? null : 'operations';
    default:
      return null;
  }
}

export function isBarrier(item: InboundItem): boolean {
  return item.type === 'resync.begin' || item.type === 'stream.end';
}

interface Hold {
  until: number;
  attempts: number;
  /**
   * Most of the subject's frames its next retry takes, once a retry was refused for good (a
   * poison frame among them): halved on the hold's own, since every other run that commits
   * doubles the shared limit back, and the retry took the same frames at every turn.
   */
  limit?: number;
}

export type Plan =
  /** Run one statement with these frames (in seq order). */
  | { run: InboundItem[] }
  /** Nothing can run before this time (held subjects, or a backoff). */
  | { waitUntil: number }
  /** Nothing pending. */
  | { idle: true };

export class IngestSchedule {
  private pending: InboundItem[] = [];
  /** The frame bytes of `pending`. */
  private pendingBytes = 0;
  private readonly held = new Map<string, Hold>();
  private chunkLimit: number;
  /** A whole-backlog backoff after a global failure (or when isolation cannot help). */
  private backoffUntil = 0;
  private backoffMs = 0;
  /** Subjects isolated since the last statement that succeeded: two means the cause is not one frame. */
  private isolatedWithoutProgress = 0;
  /** The frames of the last plan, so a failure can be attributed. */
  private lastRun: InboundItem[] = [];
  private lastRunWasRetryOf: string | null = null;
  /** The last plan was a held subject's retry: the next gives the other frames a turn. */
  private retriedLast = false;
  /** The frames of the statement sent behind the last plan's (see `behind`). */
  private behindRun: InboundItem[] = [];
  /** The subjects `behindRun` carries, kept for when it is promoted and another goes behind it. */
  private behindKeys: Set<string> | null = null;
  /** The subjects of `aheadKeysOf` (a promoted statement's frames), worked out when it was sent behind. */
  private aheadKeys: Set<string> | null = null;
  private aheadKeysOf: InboundItem[] | null = null;

  constructor(private readonly limits: ScheduleLimits = DEFAULT_SCHEDULE_LIMITS) {
    this.chunkLimit = limits.maxBatch;
  }

  get size(): number {
    return this.pending.length;
  }

  /** Frame bytes waiting to be applied. */
  get bytes(): number {
    return this.pendingBytes;
  }

  get heldSubjects(): number {
    return this.held.size;
  }

  /** When the oldest unapplied frame arrived, or null when everything is applied. */
  oldestArrival(): number | null {
    return this.pending[0]?.arrivedAt ?? null;
  }

  push(item: InboundItem): void {
    this.pending.push(item);
    this.pendingBytes += item.bytes ?? 0;
  }

  /** Forget everything unapplied (the peer replays it after a resume). */
  clear(): void {
    this.pending = [];
    this.pendingBytes = 0;
    this.held.clear();
    this.chunkLimit = this.limits.maxBatch;
    this.backoffUntil = 0;
    this.backoffMs = 0;
    this.isolatedWithoutProgress = 0;
    this.lastRun = [];
    this.lastRunWasRetryOf = null;
    this.retriedLast = false;
    this.behindRun = [];
    this.behindKeys = null;
    this.aheadKeys = null;
    this.aheadKeysOf = null;
  }

  /** Replace a frame the database refused with its rejection (same seq, same place). */
  replace(item: InboundItem): void {
    const i = this.pending.findIndex((x) => x.seq === item.seq);
    if (i >= 0) this.pending[i] = { ...item, bytes: (this.pending[i] as InboundItem).bytes ?? 0 };
  }

  next(now: number): Plan {
    if (this.pending.length === 0) return { idle: true };
    if (now < this.backoffUntil) return { waitUntil: this.backoffUntil };
    // A held subject whose time has come is retried alone first: if it still fails, nothing
    // else has to be split again to find it. But not twice in a row while other frames wait: a
    // retry that fails takes as long as the lock that holds it, longer than the next subject's
    // retry delay, and retries alone would then starve every frame behind the holes.
    const rest = this.retriedLast && this.held.size > 0 ? this.runPastHeld() : null;
    if (!(rest !== null && rest.length > 0)) {
      for (const [key, hold] of this.held) {
        if (hold.until > now) continue;
        const run = this.framesOf(key);
        if (run.length > 0) {
          this.retriedLast = true;
          return this.plan(run, key);
        }
        this.held.delete(key);
      }
    }
    this.retriedLast = false;
    // Nothing held (the steady state): the run is simply the oldest frames, and working out
    // each frame's subject would be a per-frame cost for nothing.
    if (this.held.size === 0) return this.plan(this.pending.slice(0, this.chunkLimit), null);
    const run = rest ?? this.runPastHeld();
    if (run.length > 0) return this.plan(run, null);
    return { waitUntil: Math.min(...[...this.held.values()].map((h) => h.until)) };
  }

  /** The oldest frames whose subjects are not held, up to the chunk limit and the first barrier past a held one. */
  private runPastHeld(): InboundItem[] {
    const run: InboundItem[] = [];
    let skipped = false;
    for (const item of this.pending) {
      if (run.length >= this.chunkLimit) break;
      if (isBarrier(item)) {
        if (skipped) break;
        run.push(item);
        continue;
      }
      const key = subjectOf(item);
      if (key !== null && this.held.has(key)) {
        skipped = true;
        continue;
      }
      run.push(item);
    }
    return run;
  }

  /** Shorten the last plan's run to its first `n` frames: the rest stay queued where they are. */
  trimLast(n: number): InboundItem[] {
    this.lastRun = this.lastRun.slice(0, n);
    return this.lastRun;
  }

  /** The last plan's statement committed: those frames are applied. */
  succeeded(): InboundItem[] {
    const run = this.lastRun;
    this.remove(run);
    if (this.lastRunWasRetryOf !== null) this.held.delete(this.lastRunWasRetryOf);
    this.chunkLimit = Math.min(this.limits.maxBatch, this.chunkLimit * 2);
    this.backoffMs = 0;
    this.isolatedWithoutProgress = 0;
    const ran = this.lastRun;
    this.lastRun = [];
    return ran;
  }

  /**
   * The last plan's statement failed. Returns the frame to turn into a rejection when a
   * permanent failure has been narrowed to one frame, else null.
   */
  failed(kind: FailureKind, now: number): InboundItem | null {
    const run = this.lastRun;
    this.lastRun = [];
    if (kind === 'permanent') {
      if (run.length > 1) {
        const retried = this.lastRunWasRetryOf === null ? undefined : this.held.get(this.lastRunWasRetryOf);
        if (retried) retried.limit = Math.ceil(run.length / 2);
        else this.chunkLimit = Math.ceil(run.length / 2);
        return null;
      }
      return run[0] ?? null;
    }
    // As many subjects set aside as may be held and still nothing applies: the cause is not one
    // frame. (Each lock fails every run that reaches it until its subject is set aside, so several
    // independent locks show no progress until the last of them is isolated.)
    if (kind === 'isolatable' && this.isolatedWithoutProgress < this.limits.maxHeld) {
      if (this.lastRunWasRetryOf !== null) {
        this.hold(this.lastRunWasRetryOf, now);
        return null;
      }
      if (run.length > 1) {
        this.chunkLimit = Math.ceil(run.length / 2);
        return null;
      }
      const only = run[0];
      const key = only && !isBarrier(only) ? subjectOf(only) : null;
      if (key !== null && this.held.size < this.limits.maxHeld) {
        this.isolatedWithoutProgress++;
        this.hold(key, now);
        this.chunkLimit = this.limits.maxBatch;
        return null;
      }
    }
    // Nothing to isolate (the database as a whole, or a frame that cannot be set aside): the
    // same frames again after a backoff.
    this.backoffMs = Math.min(this.limits.maxDelayMs, this.backoffMs ? this.backoffMs * 2 : this.limits.baseDelayMs);
    this.backoffUntil = now + this.backoffMs;
    return null;
  }

  /**
   * A second statement to send while `ahead` (the last plan) is in flight, or null. Only in the
   * steady state: nothing held, no backoff, full chunks, `ahead` the head of the queue and no
   * resync boundary in either. It never carries a frame whose subject `ahead` carries: if `ahead`
   * fails, nothing behind it may have overtaken one of its subjects. `member` marks frames that
   * count as a boundary does (an open resync stream's members): none when `ahead` carries one, and
   * the run behind ends before the first.
   */
  behind(now: number, member?: (item: InboundItem) => boolean): InboundItem[] | null {
    const ahead = this.lastRun;
    const n = ahead.length;
    if (n === 0 || this.pending.length <= n || this.held.size > 0 || now < this.backoffUntil) return null;
    if (this.chunkLimit < this.limits.maxBatch || this.lastRunWasRetryOf !== null) return null;
    if (this.pending[0] !== ahead[0] || this.pending[n - 1] !== ahead[n - 1]) return null;
    if (member && ahead.some(member)) return null;
    // A promoted statement's subjects were worked out when it was sent behind (and it holds no
    // boundary): working them out again was a string and a set entry per frame.
    let taken = this.aheadKeysOf === ahead ? this.aheadKeys : null;
    if (taken === null) {
      taken = new Set<string>();
      for (const item of ahead) {
        if (isBarrier(item)) return null;
        const key = subjectOf(item);
        if (key !== null) taken.add(key);
      }
    }
    const run: InboundItem[] = [];
    const keys = new Set<string>();
    let bytes = 0;
    for (let i = n; i < this.pending.length && run.length < this.chunkLimit; i++) {
      const item = this.pending[i] as InboundItem;
      if (isBarrier(item) || member?.(item)) break;
      bytes += item.bytes ?? 0;
      if (bytes > this.limits.maxBytes && run.length > 0) break;
      const key = subjectOf(item);
      if (key !== null) {
        if (taken.has(key)) continue;
        keys.add(key);
      }
      run.push(item);
    }
    if (run.length === 0) return null;
    this.behindRun = run;
    this.behindKeys = keys;
    return run;
  }

  /** Shorten the run `behind` offered to its first `n` frames: the rest stay queued where they are. */
  trimBehind(n: number): InboundItem[] {
    this.behindRun = this.behindRun.slice(0, n);
    // Its subjects are worked out again if it is promoted (`behind` reads them as the one ahead's).
    this.behindKeys = null;
    return this.behindRun;
  }

  /**
   * The statement ahead committed while the one behind is still in flight: that one is now the
   * statement ahead (its outcome read with `succeeded` / `failed`), and `behind` may offer another
   * to go behind it. Its frames are the queue's head unless it skipped a subject of the one that
   * committed; then `behind` offers nothing and the two settle as a pair.
   */
  promoteBehind(): void {
    this.lastRun = this.behindRun;
    this.lastRunWasRetryOf = null;
    this.aheadKeys = this.behindKeys;
    this.aheadKeysOf = this.behindRun;
    this.behindRun = [];
    this.behindKeys = null;
  }

  /** The statement behind committed: its frames are applied (whatever became of the one ahead). */
  behindSucceeded(): InboundItem[] {
    const run = this.behindRun;
    this.behindRun = [];
    this.behindKeys = null;
    this.remove(run);
    return run;
  }

  /**
   * The statement behind failed. After the one ahead committed, its frames are the queue's head
   * and the failure is read as any run's; after the one ahead failed too, that failure decides,
   * and these frames simply stay queued.
   */
  behindFailed(kind: FailureKind, now: number, aheadCommitted: boolean): InboundItem | null {
    const run = this.behindRun;
    this.behindRun = [];
    this.behindKeys = null;
    if (!aheadCommitted) return null;
    this.lastRun = run;
    this.lastRunWasRetryOf = null;
    return this.failed(kind, now);
  }

  /** Take an applied run off the queue. */
  private remove(run: readonly InboundItem[]): void {
    const n = run.length;
    for (const x of run) this.pendingBytes -= x.bytes ?? 0;
    if (n > 0 && this.pending[0] === run[0] && this.pending[n - 1] === run[n - 1]) {
      // A run is taken from the queue in order and only appends happen while it is in flight, so
      // one that starts and ends where the queue's first n frames do is the queue's head (for the
      // one behind: the one ahead committed and nothing was skipped).
      this.pending.splice(0, n);
    } else {
      const done = new Set(run.map((x) => x.seq));
      this.pending = this.pending.filter((x) => !done.has(x.seq));
    }
  }

  private plan(run: InboundItem[], retryOf: string | null): Plan {
    run = withinBytes(run, this.limits.maxBytes);
    this.lastRun = run;
    this.lastRunWasRetryOf = retryOf;
    return { run };
  }

  private framesOf(key: string): InboundItem[] {
    const limit = this.held.get(key)?.limit ?? this.chunkLimit;
    const run: InboundItem[] = [];
    for (const item of this.pending) {
      if (run.length >= limit || isBarrier(item)) break;
      if (subjectOf(item) === key) run.push(item);
    }
    return run;
  }

  private hold(key: string, now: number): void {
    const prev = this.held.get(key);
    const attempts = (prev?.attempts ?? 0) + 1;
    const delay = Math.min(this.limits.maxDelayMs, this.limits.baseDelayMs * 2 ** (attempts - 1));
    this.held.set(key, { until: now + delay, attempts });
  }
}

/** The longest prefix of `run` within `maxBytes` of frames, and never less than its first frame. */
function withinBytes(run: InboundItem[], maxBytes: number): InboundItem[] {
  let bytes = 0;
  for (let i = 0; i < run.length; i++) {
    bytes += (run[i] as InboundItem).bytes ?? 0;
    if (bytes > maxBytes && i > 0) return run.slice(0, i);
  }
  return run;
}
