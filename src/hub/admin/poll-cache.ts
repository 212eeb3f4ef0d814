import type { MiddlewareHandler } from 'hono';
import type { AdminEnv } from './app';

/**
 * Cheap polling for every admin read, so that many open dashboards cost the hub little:
 *
 * - Every 200 JSON answer to a GET carries a strong ETag (a hash of the body); a request whose
 *   `If-None-Match` names it gets 304 with no body.
 * - A request that says it accepts a slightly old answer (`Cache-Control: max-age=N`, as the
 *   dashboard sends) may be served the answer another request got at most `min(N s, 500 ms)`
 *   ago, and requests for the same URL that arrive while one is being computed (begun at most
 *   that long ago: its answer describes the state then) wait for it instead of running their own
 *   statement. So N pollers of one view cost at most about two
 *   statements a second per isolate, not N. A request without that header (every other client)
 *   always runs the handler: read-after-write stays exact for them; its answer is not kept.
 *   What is kept is bounded in bytes (`MAX_SHARED_BYTES`). A read that fails (a 503, say) gives
 *   its answer to the requests that joined it, and is kept for no later one.
 * - Any admin write (any method but GET, HEAD and OPTIONS) clears the shared answers of this isolate, so a dashboard sees its own
 *   action on the next poll. Clearing `answers` alone is not enough: a read that began before the
 *   write (its statement saw the old state) may finish after it. So every write bumps `writes`,
 *   and a read shares or stores its answer only if no write began while it ran; a poll after a
 *   write never joins a read from before it (`computing` is cleared too); and an answer is dated
 *   when its read began, because that is the state it describes.
 */

const MAX_SHARED_AGE_MS = 500;
/**
 * What the isolate keeps to share, in bytes of answers: a page may be a few MiB, and a script
 * walking pages with `max-age` would otherwise hold every one for the half second (the isolate has
 * 128 MiB). Past either bound an answer is simply not shared; the request still gets it.
 */
const MAX_SHARED_BODY_BYTES = 1 << 20;
const MAX_SHARED_BYTES = 16 << 20;

interface Answer {
  at: number;
  etag: string;
  body: string;
  contentType: string;
}

const answers = new Map<string, Answer>();
/** The bodies in `answers`, in UTF-16 code units (what the isolate holds). */
let sharedBytes = 0;
/**
 * A read's answer other than a 200 (a 503 while Postgres is stalled, a 404): given to the polls
 * that joined that read, never kept for later ones. Re-running it for each joiner would put N
 * statements on a struggling database at once, each after waiting out the first.
 */
interface Refusal {
  status: number;
  body: string;
  headers: [string, string][];
}

/** The read now running for a URL, with the write count and the time it began under. */
const computing = new Map<string, { writes: number; at: number; answer: Promise<Answer | Refusal | null> }>();
/** Admin writes begun in this isolate: a read whose answer straddles one must not be shared. */
let writes = 0;

/** How old an answer this request accepts, in ms (0: none). */
export function acceptableAgeMs(cacheControl: string | undefined): number {
  if (!cacheControl || /\bno-cache\b|\bno-store\b/i.test(cacheControl)) return 0;
  const m = /\bmax-age\s*=\s*"?(\d+)"?/i.exec(cacheControl);
  if (!m) return 0;
  return Math.min(Number(m[1]) * 1000, MAX_SHARED_AGE_MS);
}

async function etagOf(body: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(body));
  let hex = '';
  for (const b of new Uint8Array(digest).subarray(0, 12)) hex += b.toString(16).padStart(2, '0');
  return `"${hex}"`;
}

/** `If-None-Match` lists the tag (or is `*`). */
function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch
    .split(',')
    .map((t) => t.trim().replace(/^W\//, ''))
    .some((t) => t === etag || t === '*');
}

function respond(answer: Answer, ifNoneMatch: string | undefined): Response {
  const headers = { etag: answer.etag, 'cache-control': 'private, no-cache', vary: 'authorization' };
  if (matches(ifNoneMatch, answer.etag)) return new Response(null, { status: 304, headers });
  return new Response(answer.body, { status: 200, headers: { ...headers, 'content-type': answer.contentType } });
}

function forget(key: string): void {
  const a = answers.get(key);
  if (!a) return;
  sharedBytes -= a.body.length;
  answers.delete(key);
}

function forgetAll(): void {
  answers.clear();
  sharedBytes = 0;
}

function remember(key: string, answer: Answer): void {
  for (const [k, a] of answers) if (answer.at - a.at > MAX_SHARED_AGE_MS) forget(k);
  forget(key);
  if (answer.body.length > MAX_SHARED_BODY_BYTES || sharedBytes + answer.body.length > MAX_SHARED_BYTES) return;
  answers.set(key, answer);
  sharedBytes += answer.body.length;
}

/**
 * Methods that change nothing. HEAD is answered by the GET handler (Hono dispatches it as GET and
 * drops the body), so it is a read like GET: counted as a write, every monitoring probe's HEAD
 * would clear the answers the dashboards share and void the reads in flight.
 */
const READS = new Set(['GET', 'HEAD']);
const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

export const pollCache: MiddlewareHandler<AdminEnv> = async (c, next) => {
  const method = c.req.method;
  // OPTIONS neither reads an answer nor changes state: it passes through untouched.
  if (!READS.has(method) && SAFE.has(method)) {
    await next();
    return;
  }
  if (!READS.has(method)) {
    writes++;
    forgetAll();
    computing.clear();
    try {
      await next();
    } finally {
      // Also after: a read that began while this write ran may have seen either state.
      writes++;
      forgetAll();
      computing.clear();
    }
    return;
  }
  const url = new URL(c.req.url);
  const key = url.pathname + url.search;
  const ifNoneMatch = c.req.header('if-none-match');
  const maxAge = acceptableAgeMs(c.req.header('cache-control'));
  if (maxAge > 0) {
    const fresh = answers.get(key);
    if (fresh && Date.now() - fresh.at <= maxAge) {
      c.res = respond(fresh, ifNoneMatch);
      return;
    }
    // Its answer will describe the state when it began: joined only while that is young enough.
    const pending = computing.get(key);
    if (pending && pending.writes === writes && Date.now() - pending.at <= maxAge) {
      const shared = await pending.answer.catch(() => null);
      if (shared && 'etag' in shared) {
        c.res = respond(shared, ifNoneMatch);
        return;
      }
      if (shared) {
        c.res = new Response(shared.body, { status: shared.status, headers: shared.headers });
        return;
      }
    }
  }
  // This request computes the answer that later pollers of the same URL wait for.
  const startedAt = Date.now();
  const startedWrites = writes;
  let settle: (a: Answer | Refusal | null) => void = () => undefined;
  const running = computing.get(key);
  // A read too old to join is replaced as the one later polls join (it still answers its own).
  const mine =
    maxAge > 0 && (!running || running.writes !== writes || startedAt - running.at > MAX_SHARED_AGE_MS)
      ? { writes: startedWrites, at: startedAt, answer: new Promise<Answer | Refusal | null>((resolve) => (settle = resolve)) }
      : null;
  if (mine) computing.set(key, mine);
  try {
    await next();
    const res = c.res;
    const contentType = res.headers.get('content-type') ?? '';
    if (!contentType.startsWith('application/json')) return;
    if (res.status !== 200) {
      // Given to whoever joined this read (if no write began meanwhile), as it is; kept for no one.
      if (mine && writes === startedWrites) {
        const body = await res.text();
        const refusal: Refusal = { status: res.status, body, headers: [...res.headers] };
        settle(refusal);
        c.res = undefined;
        c.res = new Response(body, { status: res.status, headers: refusal.headers });
      }
      return;
    }
    const body = await res.text();
    const answer: Answer = { at: startedAt, etag: await etagOf(body), body, contentType };
    // A write began while this ran: the answer is right for this request, stale for later ones.
    // Kept only for a request that said it shares (a poller): no other request ever reads it.
    if (writes === startedWrites) {
      if (maxAge > 0) remember(key, answer);
      settle(answer);
    }
    c.res = undefined;
    c.res = respond(answer, ifNoneMatch);
  } finally {
    settle(null);
    if (mine && computing.get(key) === mine) computing.delete(key);
  }
};
