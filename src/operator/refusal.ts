/**
 * What a closed link means for the next attempt: the refusal policy, pure.
 *
 * The hub explains every refusal with a connection-level `error` (`seq: null`) just before it
 * closes, or with an HTTP status and a JSON error body at the upgrade. A refusal is:
 * - HTTP 401/403 at the upgrade: the token is not an enrollment token (`unauthorized`);
 * - close 4403: not registered, disabled, token rotated (`refused`);
 * - close 4409: another connection holds the cluster (`displaced`);
 * - any close before `welcome` that the hub explained with an error frame (`handshake`: another
 *   major, a `cluster_id` of another cluster, the registry unavailable…);
 * - any other HTTP status at the upgrade but 5xx and 429 (`handshake`, not retryable): no hub
 *   answers so, so it is a wrong url or something in front of the hub.
 * Every other close (network, 4408, 1013 after welcome, 4400 for a gap…) is not a refusal: the
 * operator reconnects with the ordinary backoff and resumes.
 *
 * An HTTP 5xx or 429 at the upgrade is the hub (or something in front of it) unable to take the
 * connection now: during a registry outage the hub answers 503 with a JSON body and Retry-After.
 * Retryable whatever the body says: the ordinary backoff, Retry-After honoured within its bounds
 * (`afterRetryAfter`), and a warning, not the error line of a refusal that needs a person.
 *
 * What follows a refusal: one `refused` event and one log line; when the hub said it will not
 * change its mind by itself (`retryable: false`, 4403, 4409, 401/403) the next attempt is drawn
 * under the whole backoff cap (full jitter, never past the cap); there is still no maximum retry
 * count. On 4409 the displaced session is forgotten: resuming it would take the cluster back from
 * the operator that now holds it, and the two would take turns.
 */

/** The hub's explanation: the connection-level error frame, or the JSON body of an HTTP refusal. */
export interface RefusalError {
  code: string;
  message: string;
  retryable: boolean;
}

export type RefusalKind = 'unauthorized' | 'refused' | 'displaced' | 'handshake';

export interface ClosedLink {
  closeCode: number;
  reason: string;
  /** Set when the upgrade was answered with an HTTP status instead of a WebSocket. */
  httpStatus: number | null;
  /** The link got a `welcome` (a session was open on it). */
  welcomed: boolean;
  /** The connection-level error the hub sent on this link, if any. */
  error: RefusalError | null;
}

export interface Refusal {
  kind: RefusalKind;
  closeCode: number;
  httpStatus: number | null;
  error: RefusalError | null;
  reason: string;
  /** The next attempt is drawn under the whole backoff cap (`Backoff.refusal`), not the current ceiling. */
  waitCap: boolean;
  /** The next hello asks for no session: the one in force must never be resumed. */
  forgetSession: boolean;
}

export const DISPLACED = 4409;
export const REFUSED = 4403;

/** Classify a closed link: a refusal, or null for an ordinary close. */
export function classifyClose(link: ClosedLink): Refusal | null {
  const base = { closeCode: link.closeCode, httpStatus: link.httpStatus, error: link.error, reason: link.reason };
  if (link.httpStatus === 401 || link.httpStatus === 403) {
    return { ...base, kind: 'unauthorized', waitCap: true, forgetSession: false };
  }
  if (link.closeCode === DISPLACED) return { ...base, kind: 'displaced', waitCap: true, forgetSession: true };
  if (link.closeCode === REFUSED) return { ...base, kind: 'refused', waitCap: true, forgetSession: false };
  if (!link.welcomed && link.error !== null) {
    return { ...base, kind: 'handshake', waitCap: !link.error.retryable, forgetSession: false };
  }
  if (link.httpStatus !== null && !isRetryableHttpStatus(link.httpStatus)) {
    // No hub answers an upgrade so (it explains every refusal with a JSON body): a wrong url's
    // 404, a redirect, a proxy's 400. Retrying will not fix it, and a person must hear of it.
    const error = { code: 'invalid', message: `the upgrade was answered HTTP ${link.httpStatus}, not by a hub: check the url`, retryable: false };
    return { ...base, error, kind: 'handshake', waitCap: true, forgetSession: false };
  }
  return null;
}

/** An HTTP status at the upgrade that says "not now" (5xx, 429) rather than "not you" (401, 403). */
export function isRetryableHttpStatus(status: number | null | undefined): boolean {
  return typeof status === 'number' && (status === 429 || (status >= 500 && status <= 599));
}

/**
 * The JSON error body of an HTTP refusal (`{"error": {"code", "message"}}`), if it is one;
 * retryable when the status says "not now" (isRetryableHttpStatus).
 */
export function httpRefusalError(body: string, status?: number): RefusalError | null {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return null;
  }
  const e = (json as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  if (!e || typeof e.code !== 'string' || typeof e.message !== 'string') return null;
  return { code: e.code.slice(0, 64), message: e.message.slice(0, 2048), retryable: isRetryableHttpStatus(status) };
}

/**
 * Retry-After (RFC 9110: delay-seconds or an HTTP-date) in milliseconds, or null when absent or
 * unreadable. `now` is for the date form.
 */
export function retryAfterMs(header: string | null | undefined, now: number): number | null {
  if (!header) return null;
  const text = header.trim();
  if (/^\d{1,10}$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, at - now) : null;
}

/**
 * The wait before the next dial when the hub asked for `retryAfter` ms: no sooner than it asked,
 * plus the backoff's own full-jitter draw (`drawn`) so a fleet turned away together does not come
 * back together, and never past the backoff cap (the spec bounds every reconnect at 30 s by
 * default): a hub asking for longer is asked again at the cap.
 */
export function afterRetryAfter(drawn: number, retryAfter: number | null, capMs: number): number {
  if (retryAfter === null) return drawn;
  return Math.min(capMs, Math.min(retryAfter, capMs) + drawn);
}

/**
 * The one log line of a refusal. A refusal the hub says is retryable (the registry unavailable
 * during a database outage) is a warning: the operator comes back by itself, and paging on every
 * database blip would bury the refusals that need a person (a token rotated, a cluster disabled).
 * `retryInMs` null: the client is stopping, and there is no next attempt.
 */
export function refusalLogLine(r: Refusal, retryInMs: number | null): { level: 'warn' | 'error'; msg: string; fields: Record<string, unknown> } {
  const fields = {
    kind: r.kind,
    close_code: r.closeCode,
    http_status: r.httpStatus,
    error_code: r.error?.code ?? null,
    message: r.error?.message ?? r.reason,
    retryable: r.error?.retryable ?? null,
    retry_in_ms: retryInMs,
    ...(retryInMs === null ? { stopping: true } : {}),
  };
  if (r.kind === 'displaced') {
    return {
      level: 'error',
      msg:
        'another operator holds this cluster: this one was displaced (4409); ' +
        (retryInMs === null
          ? 'it was stopping, and the next process starts a new session, never resuming the displaced one'
          : 'it comes back as a new session after the backoff cap and never resumes the displaced one'),
      fields,
    };
  }
  if (r.error?.retryable === true) return { level: 'warn', msg: 'the hub turned this connection away for now; retrying', fields };
  return { level: 'error', msg: 'the hub refused this operator', fields };
}
