/**
 * How a refusal names the field it objects to (`labels.<key>`, `taints.2.key`). An object key
 * there is the sender's own text and can be as long as the frame: quoted whole it would carry
 * half a MiB of an operator's frame into the reason, and from there into every log line and
 * rejection record that quotes the reason. Both validators (zod in catalog.ts, the hand-written
 * ones in fast-payloads.ts) name fields through here, so they keep giving the same reasons.
 */

/** The longest key a field path quotes whole, in code points; a longer one is cut and marked. */
export const PATH_KEY_MAX = 64;

/** One segment of a field path: an index as is, a key cut after PATH_KEY_MAX code points + '…'. */
export function pathSegment(key: PropertyKey): string {
  if (typeof key !== 'string') return String(key);
  // At most two UTF-16 units per code point: a key this short has nothing to cut.
  if (key.length <= PATH_KEY_MAX) return key;
  let end = 0;
  for (let n = 0; n < PATH_KEY_MAX && end < key.length; n++) {
    // Between code points: a cut through a surrogate pair would leave a lone surrogate.
    const pair = (key.charCodeAt(end) & 0xfc00) === 0xd800 && end + 1 < key.length && (key.charCodeAt(end + 1) & 0xfc00) === 0xdc00;
    end += pair ? 2 : 1;
  }
  return end < key.length ? `${key.slice(0, end)}…` : key;
}

/** A whole field path as a refusal names it (`payload` for the payload itself). */
export function fieldPath(path: readonly PropertyKey[]): string {
  return path.map(pathSegment).join('.') || 'payload';
}
