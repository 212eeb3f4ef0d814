import type { Context, MiddlewareHandler } from 'hono';
import { buildFrame, CloseCode, type ErrorCode } from '../protocol';
import { INTERNAL_HEADERS, newRouteKey, placementGenerationOf, routeKeyOf, sessionStub } from './address';
import { hubConfig } from './config';
import { failureLine } from './db/errors';
import { gatewaySql } from './db/gateway-client';
import { lookupToken, type TokenLookup } from './db/registry';
import type { HubEnv } from './env';
import { jsonError } from './http-errors';
import { createLogger } from './log';
import { addressKey, ConnectRefusals } from './connect-refusals';
import { LogBudget } from './log-budget';
import { inRegion } from './region';
import { hashToken, isEnrollmentTokenShaped, toHex } from './tokens';

const log = createLogger({ component: 'connect' });
/**
 * Refusals anyone with a well-formed token can provoke, as fast as they can connect: per isolate
 * and per reason, the first lines of a window are written and the rest summarised (log-budget.ts).
 */
const refusals = new LogBudget();
/** Addresses refused too often for an unknown token (connect-refusals.ts): per isolate. */
const unknownTokens = new ConnectRefusals();

/** Header an operator sets to resume: the session_id its last welcome named. */
export const SESSION_HINT_HEADER = 'Wingsmith-Session';

/** The request's enrollment token, or the 401 for a request that carries none. */
function enrollmentToken(c: Context<{ Bindings: HubEnv }>): string | Response {
  // A field value's trailing whitespace is not part of it (RFC 9110 5.5); local workerd keeps it.
  const auth = c.req.header('authorization')?.trim() ?? '';
  const m = /^Bearer +([^\s]+)$/i.exec(auth);
  if (m && isEnrollmentTokenShaped(m[1] as string)) return m[1] as string;
  c.header('WWW-Authenticate', 'Bearer error="invalid_token"');
  return jsonError(c, 401, 'unauthorized', 'an enrollment token is required (Authorization: Bearer wsmet_…)');
}

/**
 * Anything not shaped like an enrollment token is turned away before the upgrade and before any
 * database work: ahead of the app's own checks too, whose first request in an isolate reads the
 * database's region (app.ts), so a stalled database held anyone's malformed connect until it timed out.
 */
export const refuseWithoutEnrollmentToken: MiddlewareHandler<{ Bindings: HubEnv }> = async (c, next) => {
  const token = enrollmentToken(c);
  if (token instanceof Response) return token;
  // An address over its refusals is turned away here too, before the region's read.
  const blockedMs = unknownTokens.blockedFor(addressKey(clientAddress(c)));
  if (blockedMs > 0) return tooManyUnknown(c, blockedMs, 'connect refused without a lookup: this address presented too many unknown tokens');
  await next();
};

/** Cloudflare sets it (locally, the runtime does); named on refusals and in contention reports. */
function clientAddress(c: Context<{ Bindings: HubEnv }>): string | null {
  return c.req.header('cf-connecting-ip')?.slice(0, 64) ?? null;
}

function tooManyUnknown(c: Context<{ Bindings: HubEnv }>, retryMs: number, why: string, answer = 'too many connects with unknown enrollment tokens from this address; retry later'): Response {
  const addr = clientAddress(c);
  refusals.write(log, { kind: 'rate-limited', level: 'warn', msg: why, fields: { remote_addr: addr }, reason: `from ${addr}` });
  c.header('Retry-After', String(Math.max(1, Math.ceil(retryMs / 1000))));
  return jsonError(c, 429, 'rate_limited', answer);
}

/** `GET /v1/connect`: admit an operator and hand its WebSocket to its session's object. */
export async function connect(c: Context<{ Bindings: HubEnv }>): Promise<Response> {
  const token = enrollmentToken(c);
  if (token instanceof Response) return token;
  if (c.req.header('upgrade')?.toLowerCase() !== 'websocket') {
    return jsonError(c, 426, 'upgrade_required', 'connect with a WebSocket upgrade');
  }
  // Hono serves HEAD with the GET route, but a WebSocket upgrade can only answer a GET: the
  // session's 101 on a HEAD made the runtime fail the request with a bare 500.
  if (c.req.method !== 'GET') {
    c.header('Allow', 'GET');
    return jsonError(c, 405, 'method_not_allowed', `${c.req.method} cannot open a WebSocket; connect with GET`);
  }
  // Handed to the session object for contention reports: which operator is where.
  const remoteAddr = clientAddress(c);
  const addr = addressKey(remoteAddr);
  const blockedMs = unknownTokens.blockedFor(addr);
  if (blockedMs > 0) return tooManyUnknown(c, blockedMs, 'connect refused without a lookup: this address presented too many unknown tokens');
  if (!unknownTokens.enter(addr)) return tooManyUnknown(c, 1_000, 'connect refused without a lookup: this address has too many under way', 'too many connects under way from this address; retry later');
  try {
    return await admit(c, token, remoteAddr, addr);
  } finally {
    unknownTokens.leave(addr);
  }
}

async function admit(c: Context<{ Bindings: HubEnv }>, token: string, remoteAddr: string | null, addr: string | null): Promise<Response> {
  const tokenHash = toHex(await hashToken(token));
  const cfg = hubConfig(c.env);
  let cluster;
  try {
    // On a shared, already open connection: a handshake opens none. Behind the hub's own statements
    // (gateway-client.ts `public`): anyone with a token of the right shape causes one.
    cluster = await lookupToken(gatewaySql(c.env, 'public'), tokenHash, cfg.HUB_JURISDICTION);
  } catch (err) {
    // The operator is told to retry either way (a fix or a migration will come); the log tells
    // an outage from a fault someone must look at.
    // Every connect during an outage would write one: budgeted like the refusals.
    const line = failureLine('token lookup', err);
    refusals.write(log, { kind: `lookup-${line.level}`, level: line.level, msg: line.message, fields: { ...line.fields, remote_addr: remoteAddr }, reason: line.fields.error });
    c.header('Retry-After', '5');
    return jsonError(c, 503, 'unavailable', 'the cluster registry is unavailable; retry with backoff');
  }
  // Each region has its own registry: a token from another region's is unknown here, and the
  // message says where the operator dialled.
  if (!cluster) {
    await unknownTokens.refused(c.env.CONNECT_REFUSALS, addr);
    return refuseSocket('not_found', `enrollment token is not valid${inRegion(cfg)} (unknown or rotated)`, remoteAddr);
  }
  if (cluster.disabled) return refuseSocket('conflict', `cluster is disabled${inRegion(cfg)}`, remoteAddr, cluster.uid);
  if (cluster.ignored_hint) noteIgnoredHint(cluster.uid, cluster.ignored_hint, cfg.HUB_JURISDICTION);

  // Trimmed as the Authorization header is: a field value's surrounding whitespace is not part of
  // it (RFC 9110 5.5), and local workerd keeps it; untrimmed, a resume started a fresh session.
  const routeKey = resumableKey(cluster, c.req.header(SESSION_HINT_HEADER)?.trim()) ?? newRouteKey(cluster.placement_generation);
  const stub = sessionStub(c.env, { clusterUid: cluster.uid, routeKey, locationHint: cluster.location_hint });
  // A fresh request: nothing the operator sent besides the upgrade reaches the object.
  return stub.fetch('https://session.internal/connect', {
    headers: {
      upgrade: 'websocket',
      [INTERNAL_HEADERS.clusterUid]: cluster.uid,
      [INTERNAL_HEADERS.clusterName]: cluster.name,
      [INTERNAL_HEADERS.tokenHash]: tokenHash,
      [INTERNAL_HEADERS.routeKey]: routeKey,
      ...(remoteAddr ? { [INTERNAL_HEADERS.remoteAddr]: remoteAddr } : {}),
    },
  });
}

/**
 * The object a resume hint routes to, unless it was created under another placement than the
 * cluster's current one: placement is fixed when an object is created, so a changed location hint
 * takes effect by starting a new object (a fresh session with full resync). The generation read
 * here is the one the key was minted under, so a change committed while a connect was under way
 * is caught at the next one.
 */
function resumableKey(cluster: TokenLookup, hint: string | undefined): string | null {
  const key = routeKeyOf(hint);
  return key !== null && placementGenerationOf(key) === cluster.placement_generation ? key : null;
}

/** Clusters whose ignored hint this isolate has reported: once each, not at every connect. */
const reportedHints = new Set<string>();

function noteIgnoredHint(clusterUid: string, hint: string, jurisdiction: string | undefined): void {
  const key = `${clusterUid}/${hint}`;
  if (reportedHints.has(key)) return;
  if (reportedHints.size >= 1_000) reportedHints.clear();
  reportedHints.add(key);
  log.warn('ignoring the cluster\'s location hint: it lies outside the jurisdiction (stored before the region had one); set another with PATCH /admin/clusters/{id}', {
    cluster: clusterUid,
    location_hint: hint,
    jurisdiction: jurisdiction ?? null,
  });
}

/** A typed refusal over the socket (error frame, then 4403); no session object is involved. */
function refuseSocket(code: ErrorCode, message: string, remoteAddr: string | null, cluster?: string): Response {
  const pair = new WebSocketPair();
  const client = pair[0];
  const server = pair[1];
  server.accept();
  server.send(buildFrame({ type: 'error', payload: { code, message, retryable: false } }));
  server.close(CloseCode.REFUSED, message);
  // Budgeted per reason code: an unknown token is anyone's to send, a disabled cluster's
  // operator retries by itself; either can repeat as fast as the caller connects.
  refusals.write(log, { kind: code, level: 'warn', msg: 'connect refused', fields: { ...(cluster ? { cluster } : {}), remote_addr: remoteAddr, reason: message }, reason: remoteAddr ? `${message} (from ${remoteAddr})` : message });
  return new Response(null, { status: 101, webSocket: client });
}
