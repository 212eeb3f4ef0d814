import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { jsonError } from '../http-errors';
import type { AdminEnv } from './app';

/**
 * Fatal: a lenient decode (what reading the body as text does) puts U+FFFD in place of each byte
 * that is not UTF-8, and that text was stored and sent to the operator with a 200, as if it were
 * what the caller sent.
 */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * The admin API's JSON body at the trust boundary, before any route validates it:
 * - a body over `MAX_BODY_BYTES` is refused with 413 (`payload_too_large`) by `bodySizeGuard`,
 *   which runs first: by its Content-Length before it is read, and a chunked one as soon as it
 *   passes the limit (read to its end first, a body of any size was held in memory whole);
 * - a body must be `application/json` (415 otherwise), UTF-8 (RFC 8259 8.1) and parse (400
 *   otherwise), answered with the API's JSON error shape instead of the framework's plain text;
 * - no key may be `__proto__` (a JavaScript object would silently drop it: a value the caller
 *   sent would never be stored, with no error);
 * - no string may hold what Postgres text cannot (NUL) or a lone UTF-16 surrogate (invalid in
 *   jsonb): refused here with the field named, instead of a database error that could never
 *   succeed on retry;
 * - no value may nest more than `MAX_BODY_DEPTH` levels (400, not a stack overflow's 5xx).
 * A request without a body (as POST …/disable is sent) passes untouched; a body sent to any route,
 * one that takes none included, meets these checks (index.ts documents them on every write).
 */
export const jsonBodyGuard: MiddlewareHandler<AdminEnv> = async (c, next) => {
  if (c.req.method !== 'POST' && c.req.method !== 'PUT' && c.req.method !== 'PATCH') return next();
  const bytes = await c.req.arrayBuffer();
  if (bytes.byteLength === 0) return next();
  const header = c.req.header('content-type') ?? '';
  const type = header.split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/json') {
    return jsonError(c, 415, 'unsupported_media_type', `the body must be application/json (got ${type || 'no content type'})`);
  }
  if (!VALIDATOR_JSON_TYPE.test(header)) asPlainJson(c, bytes);
  let text: string;
  try {
    text = UTF8.decode(bytes);
  } catch {
    return jsonError(c, 400, 'invalid', 'the body is not valid UTF-8, the one encoding JSON may be sent in (a file saved as Latin-1 or UTF-16?)');
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    return jsonError(c, 400, 'invalid', `the body is not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const problem = unsafeValue(body, []);
  if (problem) return jsonError(c, 400, 'invalid', `${problem.path || 'body'}: ${problem.message}`, problem.path || undefined);
  // The route's validator asks for the JSON again: Hono would build a Response around the bytes
  // and parse them a second time. Nothing mutates the parsed value (the guard and zod only read it).
  c.req.bodyCache.json = Promise.resolve(body);
  return next();
};

/**
 * The form of a JSON content type the routes' validators (Hono's) accept: narrower than RFC 9110's
 * `type "/" subtype *( OWS ";" OWS [ parameter ] )`, which also allows a space before the `;` and
 * an empty parameter (`application/json ; charset=utf-8`, `application/json;`). Such a body passed
 * this guard and was then refused 415 by the route.
 */
const VALIDATOR_JSON_TYPE = /^application\/json(;\s*[a-zA-Z0-9-]+=([^;]+))*$/i;

/**
 * Hands the routes a request whose content type they accept. Its parameters carry nothing the
 * admin API reads: the body is UTF-8 whatever a charset says (RFC 8259 8.1, checked above). The
 * body was read already, so the request is rebuilt around its bytes.
 */
function asPlainJson(c: Context<AdminEnv>, bytes: ArrayBuffer): void {
  const headers = new Headers(c.req.raw.headers);
  headers.set('content-type', 'application/json');
  c.req.raw = new Request(c.req.url, { method: c.req.method, headers, body: bytes });
}

/**
 * The largest admin body. A body is relayed to a gateway shard over RPC, which refuses a value
 * over 32 MiB: a request past it could never complete, and was answered 503 "retry". Half of
 * it leaves room for what the relay adds (the JSON a body re-encodes to is never longer than
 * the body, escapes only shrink); a bulk PUT of the most deployments (5,000) still carries
 * about 3 KB each.
 */
export const MAX_BODY_BYTES = 16 << 20;

/** The body's size at the trust boundary, in bytes as they arrive: before `jsonBodyGuard` reads it. */
export const bodySizeGuard: MiddlewareHandler<AdminEnv> = bodyLimit({ maxSize: MAX_BODY_BYTES, onError: (c) => tooLarge(c as Context<AdminEnv>) });

function tooLarge(c: Context<AdminEnv>): Response {
  return jsonError(c, 413, 'payload_too_large', `the body is over ${MAX_BODY_BYTES} bytes, the most the admin API accepts; send fewer items per request`);
}

interface Problem {
  path: string;
  message: string;
}

// eslint-disable-next-line no-control-regex
const NUL = /\u0000/;
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function stringProblem(s: string): string | null {
  if (NUL.test(s)) return 'contains a NUL character, which cannot be stored';
  if (LONE_SURROGATE.test(s)) return 'is not valid Unicode (a lone surrogate)';
  return null;
}

/**
 * Deeper than any admin body's shape (a deployment's serving env is three levels down): a
 * body nested past it is refused, before a walk of it could exhaust the stack.
 */
export const MAX_BODY_DEPTH = 32;

/**
 * The first unsafe key or string in a parsed JSON value, depth first, with its dotted path. The
 * path is one stack pushed and popped along the walk and joined only for the problem found: a
 * bulk PUT of 1,000 deployments has tens of thousands of keys, and a path array and string per
 * key was the admin route's largest cost after the parse.
 */
export function unsafeValue(v: unknown, path: string[] = []): Problem | null {
  if (path.length > MAX_BODY_DEPTH && v !== null && typeof v === 'object') {
    return { path: path.join('.'), message: `nested more than ${MAX_BODY_DEPTH} levels deep` };
  }
  if (typeof v === 'string') {
    const m = stringProblem(v);
    return m ? { path: path.join('.'), message: m } : null;
  }
  if (v === null || typeof v !== 'object') return null;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const item: unknown = v[i];
      // Numbers, booleans and null have nothing to check: no push for them.
      if (item === null || (typeof item !== 'object' && typeof item !== 'string')) continue;
      path.push(String(i));
      const p = unsafeValue(item, path);
      path.pop();
      if (p) return p;
    }
    return null;
  }
  for (const key of Object.keys(v)) {
    path.push(key);
    const km = key === '__proto__' ? '__proto__ is not allowed as a key' : stringProblem(key);
    if (km) {
      const at = path.join('.');
      return { path: at, message: key === '__proto__' ? km : `the key ${km}` };
    }
    const p = unsafeValue((v as Record<string, unknown>)[key], path);
    path.pop();
    if (p) return p;
  }
  return null;
}
