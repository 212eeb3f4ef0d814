/**
 * What the session objects of one isolate hold unapplied, together. The runtime runs many objects
 * of a class in one isolate, which shares one memory limit (128 MB on Cloudflare), and each
 * session may hold up to its replay window of frames waiting to be applied (64 MiB by default)
 * while the database is slow or away: parsed, a frame takes 1.2 to 1.5 times its text in heap
 * (measured in V8 for the fixtures' observed types). Two busy sessions in a stalled database's
 * shadow could so take the isolate, and every session in it, down. Past `ISOLATE_UNAPPLIED_BYTES`
 * together, a session that brings more, holding at least its share, is told to come back (1013)
 * and replay, as one past its own window is.
 *
 * Counted from the holders themselves, not kept as a running total: an object the runtime resets
 * mid-batch never says what it held, and a total would keep it forever. Holders are weakly
 * referenced, so an object that is gone drops out when it is collected. Summing costs one read per
 * resident session, so a session adds it up only after each `checkEvery` bytes it received.
 */
export interface Holder {
  /** Frame bytes (text as received) held unapplied. */
  readonly bytes: number;
}

const holders = new Set<WeakRef<Holder>>();

export function holdInIsolate(h: Holder): void {
  holders.add(new WeakRef(h));
}

/** Bytes held unapplied by every live holder of this isolate, and how many hold any. */
export function heldInIsolate(): { total: number; holding: number } {
  let total = 0;
  let holding = 0;
  for (const ref of holders) {
    const h = ref.deref();
    if (h === undefined) holders.delete(ref);
    else if (h.bytes > 0) {
      total += h.bytes;
      holding++;
    }
  }
  return { total, holding };
}

/** One session's share of the isolate check: how much it received since it last added up. */
export class IsolateHoldCheck {
  private since = 0;

  constructor(
    private readonly budget: number,
    /** Received bytes between two sums: an eighth of the budget, at most 1 MiB. */
    private readonly checkEvery = Math.min(1 << 20, Math.max(1, Math.floor(budget / 8))),
  ) {}

  /**
   * Whether the isolate is over its budget and this session holds at least its share of it (the
   * average of those holding any): a session holding little is not cut for what others hold.
   * Checked once `received` has added up to `checkEvery`.
   */
  over(received: number, own: number): boolean {
    this.since += received;
    if (this.since < this.checkEvery) return false;
    this.since = 0;
    const { total, holding } = heldInIsolate();
    return total > this.budget && own * holding >= total;
  }
}
