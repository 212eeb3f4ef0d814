import { z } from '@hono/zod-openapi';
import type { KeyedPage, PageRequest } from '../db/read-paging';
import { LONE_SURROGATE } from './body-guard';

/**
 * Keyset pagination for every admin list that grows with the fleet. A page is
 * `{items, next_cursor}`; the cursor is opaque to clients: base64url of a JSON array whose first
 * element tags the list it belongs to and whose rest is the last key of the page. Keyset rather
 * than offset, so a page costs the same wherever it starts and rows written while a client walks
 * the list never make it skip or repeat an item.
 */

export const PAGE_LIMIT_DEFAULT = 100;
export const PAGE_LIMIT_MAX = 500;

export const LimitParam = z.coerce
  .number()
  .int()
  .min(1)
  .max(PAGE_LIMIT_MAX)
  .default(PAGE_LIMIT_DEFAULT)
  .openapi({ description: `items per page, 1–${PAGE_LIMIT_MAX}`, example: PAGE_LIMIT_DEFAULT });

export interface CursorCodec<K extends readonly unknown[]> {
  encode(key: K): string;
  /** null for anything this list did not issue: wrong tag, wrong shape, not base64url JSON. */
  decode(cursor: string): K | null;
  /** The `cursor` query parameter: validated here, so a malformed cursor is a 400 naming `cursor`. */
  readonly param: z.ZodOptional<z.ZodString>;
}

export function cursorCodec<K extends readonly unknown[]>(tag: string, key: z.ZodType<K>): CursorCodec<K> {
  const decode = (cursor: string): K | null => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(fromBase64Url(cursor));
    } catch {
      return null;
    }
    if (!Array.isArray(parsed) || parsed[0] !== tag) return null;
    const r = key.safeParse(parsed.slice(1));
    return r.success ? r.data : null;
  };
  return {
    encode: (k) => toBase64Url(JSON.stringify([tag, ...k])),
    decode,
    param: z
      .string()
      .max(2048)
      .refine((s) => decode(s) !== null, { message: 'malformed cursor: pass next_cursor from the previous page unchanged' })
      .optional()
      .openapi({ description: 'next_cursor of the previous page (opaque)' }),
  };
}

/** The response shape of every paginated list. */
export function pageSchema<T extends z.ZodType>(item: T, name: string) {
  return z
    .object({
      items: z.array(item),
      next_cursor: z.string().nullable().openapi({ description: 'pass as ?cursor= for the next page; null on the last page' }),
    })
    .openapi(name);
}

/** Decode a cursor the query schema already accepted (the refine above guarantees it decodes). */
export function pageRequest<K extends readonly unknown[]>(codec: CursorCodec<K>, q: { limit: number; cursor?: string | undefined }): PageRequest<K> {
  return { after: q.cursor === undefined ? null : codec.decode(q.cursor), limit: q.limit };
}

export function toResponsePage<T, K extends readonly unknown[]>(codec: CursorCodec<K>, page: KeyedPage<T, K>): { items: T[]; next_cursor: string | null } {
  return { items: page.items, next_cursor: page.next === null ? null : codec.encode(page.next) };
}

// Key element shapes. A key is bound as a statement parameter, so anything the database would
// refuse (a NUL in text, a timestamp it cannot represent) must be refused here: otherwise a forged
// cursor costs a round trip and comes back as a 400 that does not name `cursor`.

/** Microsecond UTC timestamp, exactly as the data modules emit it for a key. */
const KEY_TS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
export const KeyTimestamp = z.string().refine((s) => {
  if (!KEY_TS_RE.test(s)) return false;
  // Year 0000 is a valid ISO instant for Date but not for Postgres (its years start at 1 AD).
  if (s.startsWith('0000')) return false;
  const ms = `${s.slice(0, 23)}Z`;
  const d = new Date(ms);
  // Round-trips only for a real calendar instant (no month 13, no 30 February).
  return !Number.isNaN(d.getTime()) && d.toISOString() === ms;
});
/**
 * Postgres text cannot hold U+0000. Nor can UTF-8 carry a lone surrogate (a JSON escape can): it
 * would be bound as U+FFFD, past every real key, and answer an empty page marked as the last.
 */
export const KeyText = z
  .string()
  .min(1)
  .max(512)
  .refine((s) => !s.includes('\0') && !LONE_SURROGATE.test(s));
/** A bigserial id, carried as a decimal string so it survives JSON whatever its size. */
export const KeyBigint = z.string().regex(/^[1-9][0-9]{0,17}$/);

function toBase64Url(text: string): string {
  let bin = '';
  for (const b of new TextEncoder().encode(text)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(s: string): string {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new Error('not base64url');
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4));
  const bytes = Uint8Array.from(bin, (ch) => ch.charCodeAt(0));
  return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
}
