/**
 * A value with its object keys in the order Postgres's jsonb keeps them: shorter keys first, then
 * by their UTF-8 bytes (arrays keep their order). A desired change sent straight from the admin
 * write then has the same bytes as the same revision read back from Postgres (a resync, a fetch,
 * a GET): an operator that renders a map in the order it reads it (env into a pod spec) sees one
 * revision one way, not a reordered copy after every fresh session.
 */
export function jsonbOrder<T>(v: T): T {
  if (Array.isArray(v)) return v.map((e) => jsonbOrder(e)) as T;
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  const keys = Object.keys(v).sort(jsonbKeyOrder);
  for (const k of keys) out[k] = jsonbOrder((v as Record<string, unknown>)[k]);
  return out as T;
}

/** jsonb's key order: UTF-8 length, then bytes (code point order is UTF-8 byte order). */
function jsonbKeyOrder(a: string, b: string): number {
  const la = utf8Bytes(a);
  const lb = utf8Bytes(b);
  if (la !== lb) return la - lb;
  const ca = [...a];
  const cb = [...b];
  for (let i = 0; i < ca.length && i < cb.length; i++) {
    const d = (ca[i] as string).codePointAt(0)! - (cb[i] as string).codePointAt(0)!;
    if (d !== 0) return d;
  }
  return ca.length - cb.length;
}

function utf8Bytes(s: string): number {
  let n = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}
