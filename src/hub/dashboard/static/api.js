// @ts-check
// The admin API as the dashboard uses it: the bearer from session storage on every call, ETags
// on every poll, and a 401 anywhere sends the user back to the sign-in form.

const TOKEN_KEY = 'wingsmith.admin-token';

/** Session storage only: gone with the tab, never in a URL or a cookie. */
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  /** @param {string} t */
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** An error answer of the admin API: `{"error": {"code", "message", "field"?}}`. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {string} message
   * @param {string | undefined} field
   */
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    /** When the hub asked to be asked again (its Retry-After, in ms), or 0. */
    this.retryAfterMs = 0;
  }
}

/**
 * What an HTTP header can carry unchanged: printable ASCII, no space at either end (a header
 * value is trimmed). fetch() throws on anything else before sending, which would read as "hub
 * unreachable" for ever; the hub refuses to run with such an ADMIN_TOKEN for the same reason.
 */
const SENDABLE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

/**
 * Why a token cannot be used, or null when it can be sent.
 * @param {string} t
 */
export function tokenProblem(t) {
  if (!t) return 'Enter the admin token printed by npm start (or set as ADMIN_TOKEN).';
  if (!SENDABLE.test(t)) return 'That is not an admin token: it has characters an HTTP header cannot carry (an admin token is printable ASCII). Check what was pasted.';
  return null;
}

/** @type {(reason: string) => void} */
let onUnauthorized = () => undefined;
/** @param {(reason: string) => void} fn */
export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

/**
 * @param {Response} res
 * @returns {Promise<ApiError>}
 */
async function errorOf(res) {
  /** @type {any} */
  let body = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: keep the status
  }
  const e = body && typeof body === 'object' ? body.error : null;
  const err = new ApiError(res.status, e?.code ?? 'http_' + res.status, e?.message ?? `HTTP ${res.status}`, e?.field);
  // Seconds only (the hub sends "5"); at most a minute, so a wrong header cannot stop the view.
  const after = Number(res.headers.get('retry-after'));
  if (Number.isFinite(after) && after > 0) err.retryAfterMs = Math.min(after, 60) * 1000;
  return err;
}

/**
 * The auth layer refused the bearer: a 401, or a 400 that carries a Bearer challenge (an older
 * hub refuses a token of a shape it does not accept that way). Either way the token will never
 * work: forget it and ask again instead of retrying it every second.
 * @param {Response} res
 */
function authRefused(res) {
  return res.status === 401 || (res.status === 400 && /^\s*bearer\b/i.test(res.headers.get('www-authenticate') ?? ''));
}

/**
 * @param {Response} res
 * @returns {Promise<ApiError>}
 */
async function signOutWith(res) {
  token.clear();
  onUnauthorized('The admin token was not accepted. Sign in again.');
  return errorOf(res);
}

/**
 * One admin call. Resolves with the JSON body; rejects with ApiError.
 * @param {string} method
 * @param {string} path under /admin
 * @param {unknown} [body]
 * @param {Record<string, string>} [extraHeaders]
 * @returns {Promise<any>}
 */
export async function call(method, path, body, extraHeaders = {}) {
  const t = token.get();
  if (!t) {
    onUnauthorized('Sign in with the admin token.');
    throw new ApiError(401, 'unauthorized', 'not signed in', undefined);
  }
  /** @type {Record<string, string>} */
  const headers = { ...extraHeaders, authorization: `Bearer ${t}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const signal = AbortSignal.timeout(CALL_TIMEOUT_MS);
  try {
    const res = await fetch(`/admin${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store', signal });
    if (authRefused(res)) throw await signOutWith(res);
    if (!res.ok) throw await errorOf(res);
    return res.status === 204 ? null : await res.json();
  } catch (err) {
    if (!signal.aborted) throw err;
    throw new ApiError(0, 'no_answer', `no answer in ${CALL_TIMEOUT_MS / 1000} s: the hub, or the way to it, is stuck, and whether this was done is unknown. Look again before repeating it (a Put, or an operation started from this form, is safe to repeat).`, undefined);
  }
}

/**
 * How long a write waits for its answer, body included: longer than the hub's own deadlines at
 * their defaults (a statement's 10 s and its hops'; a hub configured with a longer
 * PG_QUERY_TIMEOUT_MS may answer later, and its write is then said to be of unknown outcome,
 * which it is from here). Without one, a write the way to the hub never answered left its form
 * disabled for good, and said nothing. Its error has status 0: not the hub's refusal, so an
 * operation's start keeps its Idempotency-Key for the retry (forms.js).
 */
const CALL_TIMEOUT_MS = 20_000;

/**
 * The last answer of each polled path, and the refresh that last read it (`read`).
 * @type {Map<string, {etag: string, data: any, read: number}>}
 */
const polled = new Map();
/** Refreshes of the open view so far (counted by endRefresh). */
let refreshes = 0;
/**
 * Refreshes a path is remembered for without being read: the fleet view of an older hub reads the
 * cluster list every fifth refresh, and keeps its ETag between reads.
 */
const KEEP_UNREAD = 5;

/**
 * How long a poll waits for its answer, body included. Longer than any deadline of the hub's own
 * (a statement's and its hops', a session's live view): past it the hub, or the way to it, is
 * wedged, and the live loop, which runs one refresh at a time, would wait with it for good while
 * the page went on saying it was live.
 */
const POLL_TIMEOUT_MS = 15_000;

/** A poll that got no answer in time (`POLL_TIMEOUT_MS`). */
class PollTimeout extends Error {
  constructor() {
    super(`no answer in ${POLL_TIMEOUT_MS / 1000} s`);
    this.name = 'PollTimeout';
  }
}

/**
 * A GET for polling: sends the ETag of the last answer and accepts an answer up to a second old
 * (the hub then shares one answer between all pollers). Resolves with `{data, changed}`.
 * @param {string} path under /admin
 * @returns {Promise<{data: any, changed: boolean}>}
 */
export async function poll(path) {
  const t = token.get();
  if (!t) {
    onUnauthorized('Sign in with the admin token.');
    throw new ApiError(401, 'unauthorized', 'not signed in', undefined);
  }
  const last = polled.get(path);
  /** @type {Record<string, string>} */
  const headers = { authorization: `Bearer ${t}`, 'cache-control': 'max-age=1' };
  if (last) headers['if-none-match'] = last.etag;
  const signal = AbortSignal.timeout(POLL_TIMEOUT_MS);
  try {
    const res = await fetch(`/admin${path}`, { headers, cache: 'no-store', signal });
    if (res.status === 304 && last) {
      last.read = refreshes;
      return { data: last.data, changed: false };
    }
    if (authRefused(res)) throw await signOutWith(res);
    if (!res.ok) throw await errorOf(res);
    const data = await res.json();
    const etag = res.headers.get('etag');
    if (etag) polled.set(path, { etag, data, read: refreshes });
    return { data, changed: true };
  } catch (err) {
    if (signal.aborted) throw new PollTimeout();
    throw err;
  }
}

/**
 * Every page of a paginated list (`{items, next_cursor}`; `GET /admin/clusters` may still answer
 * `{clusters, next}` on an older hub), up to `maxPages`. Changed when any page changed;
 * `truncated` when the list goes on past the last page read, so the caller can say so instead
 * of presenting part of the list as all of it.
 * @param {string} path
 * @param {{maxPages?: number, more?: string}} [opts] `more`: query added to pages after the first
 * @returns {Promise<{items: any[], changed: boolean, first: any, truncated: boolean}>}
 */
export async function pollAll(path, { maxPages = 20, more = '' } = {}) {
  const sep = path.includes('?') ? '&' : '?';
  /** @type {any[]} */
  const items = [];
  let changed = false;
  let first = null;
  /** @type {{param: string, value: string} | null} */
  let cursor = null;
  for (let i = 0; i < maxPages; i++) {
    const q = cursor === null ? '' : `${sep}${more ? `${more}&` : ''}${cursor.param}=${encodeURIComponent(cursor.value)}`;
    const page = await poll(path + q);
    changed ||= page.changed;
    first ??= page.data;
    items.push(...(page.data.items ?? page.data.clusters ?? []));
    if (page.data.next_cursor) cursor = { param: 'cursor', value: page.data.next_cursor };
    else if (page.data.next) cursor = { param: 'after', value: page.data.next };
    else return { items, changed, first, truncated: false };
  }
  return { items, changed, first, truncated: true };
}

/**
 * A refresh of the open view is done: forget the paths it has stopped reading. A view stays open
 * for days on a wall screen, and what it reads moves (each open operation is followed, a long
 * list's page cursors change): kept until the view changed, they grew without end.
 */
export function endRefresh() {
  refreshes++;
  for (const [path, last] of polled) if (refreshes - last.read > KEEP_UNREAD) polled.delete(path);
}

/** Forget the ETags: the next poll re-reads and re-renders everything. */
export function forgetPolls() {
  polled.clear();
}
