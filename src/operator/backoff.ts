/**
 * Reconnect delays: exponential from `baseMs` to `capMs` with full jitter (a uniformly random
 * delay in [0, min(cap, base · 2^attempt)]), so a fleet of operators cut off by the same hub
 * restart does not come back in lockstep. There is no maximum retry count.
 */
export interface BackoffPolicy {
  baseMs: number;
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, capMs: 30_000 };

export class Backoff {
  private attempts = 0;

  constructor(
    readonly policy: BackoffPolicy = DEFAULT_BACKOFF,
    private readonly random: () => number = Math.random,
  ) {
    if (!(policy.baseMs > 0) || !(policy.capMs >= policy.baseMs)) throw new RangeError('backoff needs 0 < base ≤ cap');
  }

  /** Attempts since the last reset. */
  get attempt(): number {
    return this.attempts;
  }

  /** The ceiling the next delay is drawn under. */
  ceiling(attempt = this.attempts): number {
    // 2^attempt overflows to Infinity long after the cap is reached; min() keeps it finite.
    return Math.min(this.policy.capMs, this.policy.baseMs * 2 ** Math.min(attempt, 52));
  }

  /** The next delay, in whole milliseconds. */
  next(): number {
    const ceiling = this.ceiling();
    this.attempts++;
    const r = this.random();
    const unit = r >= 0 && r < 1 ? r : 0;
    return Math.min(ceiling, Math.floor(unit * (ceiling + 1)));
  }

  /** Jump to the cap: for refusals, where trying again soon cannot help. */
  saturate(): void {
    this.attempts = Math.max(this.attempts, Math.ceil(Math.log2(this.policy.capMs / this.policy.baseMs)));
  }

  /**
   * The delay after a refusal: at least the whole cap, not a draw under it (a draw could retry a
   * refused version within a second), plus up to a fifth of it at random, so a fleet refused at
   * once (a release of another major, a hub that disabled many clusters) does not come back in
   * lockstep. Later delays stay at the cap's ceiling, with jitter, until a reset.
   */
  refusal(): number {
    this.saturate();
    this.attempts++;
    const r = this.random();
    const unit = r >= 0 && r < 1 ? r : 0;
    return this.policy.capMs + Math.floor(unit * (this.policy.capMs / 5));
  }

  reset(): void {
    this.attempts = 0;
  }
}
