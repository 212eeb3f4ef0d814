/** Text from an operator, made fit for Postgres: every column the hub writes from a frame goes through here. */

// NUL (Postgres text cannot hold it) and UTF-16 surrogates (one may stand alone).
// eslint-disable-next-line no-control-regex
const NEEDS_MENDING = /[\u0000\uD800-\uDFFF]/;
const REPLACEMENT = '\uFFFD';

/**
 * Operator text as Postgres text and jsonb can hold it, whatever the sender wrote: NUL and lone
 * UTF-16 surrogates become U+FFFD (JSON.stringify writes a lone surrogate as `\ud83d`, which
 * jsonb refuses with 22P02, a permanent error), and the cut to at most `maxChars` characters
 * falls between code points (as the protocol counts characters), never inside a pair, which
 * would make a lone surrogate of a valid emoji. Every text of a rejection goes through it: the
 * record of a frame that can never apply must never itself be unrecordable.
 */
export function storableText(s: string, maxChars: number): string {
  if (s.length <= maxChars && !NEEDS_MENDING.test(s)) return s;
  let out = '';
  let chars = 0;
  for (let i = 0; i < s.length && chars < maxChars; i++, chars++) {
    const c = s.charCodeAt(i);
    if (c === 0) out += REPLACEMENT;
    else if (c < 0xd800 || c > 0xdfff) out += s.charAt(i);
    else if (c <= 0xdbff && i + 1 < s.length && isLowSurrogate(s.charCodeAt(i + 1))) {
      out += s.slice(i, i + 2);
      i++;
    } else out += REPLACEMENT;
  }
  return out;
}

/**
 * Whether any string in `value` (walked through arrays and objects, keys included) holds what
 * Postgres text and jsonb cannot: NUL or a lone surrogate. A pair (an emoji) is storable.
 */
export function holdsUnstorableText(value: unknown): boolean {
  if (typeof value === 'string') return NEEDS_MENDING.test(value) && storableText(value, value.length) !== value;
  if (typeof value !== 'object' || value === null) return false;
  if (Array.isArray(value)) return value.some((v) => holdsUnstorableText(v));
  // A key is text too (a label's, in jsonb).
  return Object.entries(value).some(([k, v]) => holdsUnstorableText(k) || holdsUnstorableText(v));
}

/**
 * Printable ASCII only, everything else written as a `\uXXXX` escape (per UTF-16 unit, as JSON
 * would), cut to at most `max` characters without splitting an escape: text that no column or
 * encoding can refuse, for the last record the hub keeps of a frame before it keeps none.
 */
export function asciiText(s: string, max: number): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const piece = c >= 0x20 && c < 0x7f ? s.charAt(i) : `\\u${c.toString(16).padStart(4, '0')}`;
    if (out.length + piece.length > max) break;
    out += piece;
  }
  return out;
}

function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}
