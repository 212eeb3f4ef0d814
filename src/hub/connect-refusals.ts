/**
 * Connects refused for an unknown token, counted per client address. Anyone can mint a string
 * shaped like an enrollment token, and each one costs a registry lookup on the gateway's shared
 * connections, where it waits behind the hub's own statements but ahead of other operators'
 * connects: one address trying tokens as fast as it can connect delayed every operator's
 * reconnect (503 and back off) for as long as it went on. An address refused more than the
 * binding's limit in its period is answered 429 without a lookup for that period.
 *
 * Counted by the platform's rate-limit binding (`CONNECT_REFUSALS`, wrangler.toml: per location,
 * approximate), so every isolate of a location shares the count; each isolate remembers the
 * addresses it found over the limit, so a blocked address costs no call at all until its period
 * ends. Only refusals count: an operator with a valid token behind the same address is blocked
 * only while that address is, and then backs off as from a 503 (Retry-After). Without the binding
 * (a deployment that left it out) or without an address (local development, where the runtime
 * sets none), nothing is limited.
 */

/** How long an address over the limit is refused without a lookup: the binding's period (10 s). */
export const REFUSAL_BLOCK_MS = 10_000;

/** Addresses an isolate remembers as blocked; past this the oldest is forgotten (it may cost one call more). */
const MAX_BLOCKED = 10_000;

/** The binding as the hub uses it (workers-types' `RateLimit`). */
export interface RefusalCounter {
  limit(options: { key: string }): Promise<{ success: boolean }>;
}

export class ConnectRefusals {
  /** Address → when its block ends (ms, this isolate's clock), oldest first. */
  private readonly blocked = new Map<string, number>();

  /** Milliseconds until `addr` may connect again, or 0 when it may now. */
  blockedFor(addr: string | null, now: number = Date.now()): number {
    if (addr === null) return 0;
    const until = this.blocked.get(addr);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.blocked.delete(addr);
    return 0;
  }

  /**
   * Count a refusal of `addr` (an unknown or rotated token). A failure of the binding itself is
   * swallowed: a refusal must not fail for its count, and the next refusal counts again.
   */
  async refused(counter: RefusalCounter | undefined, addr: string | null, now: number = Date.now()): Promise<boolean> {
    if (!counter || addr === null) return false;
    let over: boolean;
    try {
      over = !(await counter.limit({ key: addr })).success;
    } catch {
      return false;
    }
    if (!over) return false;
    this.blocked.delete(addr);
    this.blocked.set(addr, now + REFUSAL_BLOCK_MS);
    if (this.blocked.size > MAX_BLOCKED) this.blocked.delete(this.blocked.keys().next().value as string);
    return true;
  }
}
