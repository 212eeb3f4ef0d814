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

  /** Jump to the cap: for refusals, where climbing the ceiling from 1 s again cannot help. */
  saturate(): void {
    this.attempts = Math.max(this.attempts, Math.ceil(Math.log2(this.policy.capMs / this.policy.baseMs)));
  }

  /**
   * The delay after a refusal: a full-jitter draw under the cap itself (0–30 s by default), not
   * under the ceiling the attempt count has reached. The spec bounds every reconnect ("exponential
   * from 1s to 30s with full jitter") and says nothing else about refusals, so a refusal may not
   * wait past the cap (it used to wait the cap plus up to a fifth: 30–36 s); drawing over the whole
   * cap spreads a fleet refused at once (a release of another major, many clusters disabled
   * together) as widely as the bound allows, where a floor under the draw would bunch it into the
   * top of the range. Later delays stay at the cap's ceiling, with jitter, until a reset.
   */
  refusal(): number {
    this.saturate();
    return this.next();
  }

  reset(): void {
    this.attempts = 0;
  }
}
