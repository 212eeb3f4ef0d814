/**
 * Enrollment tokens: `wsmet_` + 43 base62 characters (256 random bits) + 6 base62 characters of
 * CRC-32 over the prefix and body. The prefix makes a leaked token findable by secret scanners;
 * the checksum rejects a mistyped or truncated token (and anything merely token-like) from its
 * shape alone, before any database work. It is a public CRC, not a signature: anyone can mint a
 * string that passes it, and each such string costs a lookup, in the lowest of the gateway's
 * queues (pg-handover.ts); a deployment rate-limits /v1/connect at the edge (README). Only the
 * SHA-256 of the whole token is stored.
 */
export const TOKEN_PREFIX = 'wsmet_';
const BODY_LEN = 43;
const CHECK_LEN = 6;
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const TOKEN_RE = new RegExp(`^${TOKEN_PREFIX}[0-9A-Za-z]{${BODY_LEN}}[0-9A-Za-z]{${CHECK_LEN}}$`);

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(s: string): number {
  let c = 0xffffffff;
  for (let i = 0; i < s.length; i++) c = (CRC_TABLE[(c ^ s.charCodeAt(i)) & 0xff] as number) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function base62(n: bigint, width: number): string {
  let out = '';
  while (n > 0n) {
    out = ALPHABET[Number(n % 62n)] + out;
    n /= 62n;
  }
  return out.padStart(width, '0');
}

function checksum(prefixAndBody: string): string {
  return base62(BigInt(crc32(prefixAndBody)), CHECK_LEN);
}

/** A new enrollment token (256 bits of randomness). */
export function generateEnrollmentToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  const body = base62(n, BODY_LEN);
  return TOKEN_PREFIX + body + checksum(TOKEN_PREFIX + body);
}

/** True when the string is shaped like an enrollment token and its checksum holds. */
export function isEnrollmentTokenShaped(token: string): boolean {
  if (!TOKEN_RE.test(token)) return false;
  const cut = token.length - CHECK_LEN;
  return checksum(token.slice(0, cut)) === token.slice(cut);
}

/** SHA-256 of the token: what the registry stores and looks up by. */
export async function hashToken(token: string): Promise<Uint8Array> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(token));
  return new Uint8Array(digest);
}

export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}

export function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
}
