/**
 * Connects refused for an unknown token, counted per client address. Anyone can mint a string
 * shaped like an enrollment token, and each one costs a registry lookup on the gateway's shared
 * connections, where it waits behind the hub's own statements but ahead of other operators'
 * connects: one address trying tokens as fast as it can connect delayed every operator's
 * reconnect (503 and back off) for as long as it went on.
 *
 * - Refusals are counted by the platform's rate-limit binding (`CONNECT_REFUSALS`, wrangler.toml:
 *   per location, approximate), so the isolates of a location share the count. An address over
 *   the limit is answered 429 without a lookup until the binding's period ends; each isolate
 *   remembers the addresses it found over it, so a blocked address costs no call at all (an
 *   isolate that has not seen it yet pays one more lookup before it knows).
 * - The count comes after a lookup has ended, so an address also has at most
 *   `MAX_LOOKUPS_IN_FLIGHT` lookups under way in an isolate at once: without it, connects opened
 *   together all got their lookup before the first refusal was counted.
 * - An address is a client's IPv4 address or its IPv6 /64 (one host holds a whole /64).
 *
 * Only refusals count: an operator with a valid token behind the same address is held back only
 * while that address is, and backs off as from a 503 (Retry-After). A loopback address is not
 * counted: Cloudflare never sets one, and locally the runtime sets the client's (127.0.0.1), where
 * every operator of `npm start` and of the tests shares it and a few rotated tokens retrying would
 * hold them all back. Without the binding (a deployment that left it out) or without an address,
 * nothing is counted either.
 */
import { createLogger } from './log';

/** How long an address over the limit is refused without a lookup: the binding's period (wrangler.toml). */
export const REFUSAL_BLOCK_MS = 10_000;

/** Lookups one address may have under way in one isolate. */
export const MAX_LOOKUPS_IN_FLIGHT = 64;

/** Addresses an isolate remembers as blocked; past this the oldest is forgotten (it may cost one call more). */
const MAX_BLOCKED = 10_000;

/** The binding as the hub uses it (workers-types' `RateLimit`). */
export interface RefusalCounter {
  limit(options: { key: string }): Promise<{ success: boolean }>;
}

const log = createLogger({ component: 'connect' });

/** 127.0.0.0/8, ::1 (however written) and 127/8 mapped into IPv6. */
const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|(0{0,4}:){0,7}:?0{0,3}1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;

/**
 * The key an address is counted under: an IPv4 address as it is, an IPv6 address as its /64
 * (`2001:db8:0:1::/64`). Null for none, and for a loopback address (not counted). Anything that
 * does not parse is its own key.
 */
export function addressKey(addr: string | null | undefined): string | null {
  if (!addr) return null;
  const a = addr.trim().toLowerCase();
  if (LOOPBACK.test(a)) return null;
  if (!a.includes(':')) return a;
  const halves = a.split('::');
  if (halves.length > 2) return a;
  const groups = (s: string | undefined) => (s ? s.split(':') : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  // An IPv4 tail (::ffff:192.0.2.1) is two groups, all in the host half.
  const width = (g: string[]) => g.reduce((n, x) => n + (x.includes('.') ? 2 : 1), 0);
  const missing = 8 - width(head) - width(tail);
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return a;
  const all = [...head, ...Array<string>(missing).fill('0'), ...tail];
  const prefix = all.slice(0, 4).map((g) => (/^[0-9a-f]{1,4}$/.test(g) ? parseInt(g, 16).toString(16) : null));
  if (prefix.some((g) => g === null)) return a;
  return `${prefix.join(':')}::/64`;
}

export class ConnectRefusals {
  /** Key → when its block ends (ms, this isolate's clock), oldest first. */
  private readonly blocked = new Map<string, number>();
  private readonly inFlight = new Map<string, number>();
  private bindingFailed = false;

  /** Milliseconds until `key` may connect again, or 0 when it may now. */
  blockedFor(key: string | null, now: number = Date.now()): number {
    if (key === null) return 0;
    const until = this.blocked.get(key);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.blocked.delete(key);
    return 0;
  }

  /** Start a lookup for `key`: false when it has `MAX_LOOKUPS_IN_FLIGHT` under way already. */
  enter(key: string | null): boolean {
    if (key === null) return true;
    const n = this.inFlight.get(key) ?? 0;
    if (n >= MAX_LOOKUPS_IN_FLIGHT) return false;
    this.inFlight.set(key, n + 1);
    return true;
  }

  /** A lookup `enter` admitted has ended. */
  leave(key: string | null): void {
    if (key === null) return;
    const n = (this.inFlight.get(key) ?? 1) - 1;
    if (n > 0) this.inFlight.set(key, n);
    else this.inFlight.delete(key);
  }

  /**
   * Count a refusal of `key` (an unknown or rotated token); true when it put the address over the
   * limit. A failure of the binding itself is logged once per isolate and otherwise let pass: a
   * refusal must not fail for its count.
   */
  async refused(counter: RefusalCounter | undefined, key: string | null, now: number = Date.now()): Promise<boolean> {
    if (!counter || key === null) return false;
    let over: boolean;
    try {
      over = !(await counter.limit({ key })).success;
    } catch (err) {
      if (!this.bindingFailed) {
        this.bindingFailed = true;
        log.error('the CONNECT_REFUSALS rate-limit binding failed: refused connects are not being limited', { error: err instanceof Error ? err.message : String(err) });
      }
      return false;
    }
    if (!over) return false;
    this.blocked.delete(key);
    this.blocked.set(key, now + REFUSAL_BLOCK_MS);
    if (this.blocked.size > MAX_BLOCKED) this.blocked.delete(this.blocked.keys().next().value as string);
    return true;
  }
}
