/** FNV-1a over a string's UTF-16 code units, as an unsigned 32-bit integer: stable placement by key. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
