/**
 * What every admin read shares (reads.ts, reads-history.ts): one statement each. Every per-cluster read resolves the cluster (uid or name) in the same statement
 * and returns no row at all for an unknown cluster, so "no such cluster" and "an empty page" are
 * told apart without a second round trip: `null` means the former.
 *
 * Pages are keyset pages: the statement fetches one row more than asked, and the key of the
 * last returned row becomes the next page's lower bound.
 */

export interface KeyedPage<T, K> {
  items: T[];
  /** The key of the last item when more follow, else null. */
  next: K | null;
}

export interface PageRequest<K> {
  after: K | null;
  limit: number;
}

export const CLUSTER_CTE = `cl as (select uid from clusters where uid = $1 or name = $1)`;

/** Timestamps leave as ISO 8601 UTC strings with milliseconds, the same whatever the driver's type parsing. */
export const iso = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
/**
 * A timestamp that is part of a key keeps Postgres' full (microsecond) precision: a key rounded to
 * milliseconds would make the next page skip or repeat rows written within the same millisecond.
 */
export const keyTs = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * Rows come from `cl left join page on true`: none when the cluster is unknown, one row with a
 * null key when the page is empty, else up to limit + 1 rows.
 */
export function toPage<R, T, K>(
  rows: R[],
  limit: number,
  present: (r: R) => boolean,
  item: (r: R) => T,
  key: (r: R) => K,
): KeyedPage<T, K> | null {
  return pageOf(rows, limit, present, item, key, (hits) => hits);
}

/** A page of the present rows; more follow when the rows fetched (`fetched`) outnumber it. */
function pageOf<R, T, K>(
  rows: R[],
  limit: number,
  present: (r: R) => boolean,
  item: (r: R) => T,
  key: (r: R) => K,
  fetched: (hits: number) => number,
): KeyedPage<T, K> | null {
  if (rows.length === 0) return null;
  const hits = rows.filter(present);
  const page = hits.slice(0, limit);
  const last = page[page.length - 1];
  return { items: page.map(item), next: fetched(hits.length) > page.length && last !== undefined ? key(last) : null };
}

export const num = (v: string | number): number => Number(v);
export const numOrNull = (v: string | number | null): number | null => (v === null ? null : Number(v));


/**
 * Bytes a page of a list whose rows can be large (deployments with their replica sets, nodes with
 * their labels) carries at most, besides its first row. Every page crosses the gateway's RPC, which
 * carries 32 MiB at most: a page bounded only in rows (500 deployments of 4,096 replica ids each,
 * all within the protocol's limits) could never be read. The largest row (a replica set, a serving
 * configuration and a message, each at most a frame) is a few MiB, and a string can take twice its
 * UTF-8 bytes in the RPC's encoding, so a page stays well under the limit.
 */
export const READ_PAGE_BYTES = 4 * 1024 * 1024;

/**
 * `sized` (a CTE with at most limit + 1 rows, each with `sz`, its estimated bytes) cut to the first
 * rows whose bytes before them are under READ_PAGE_BYTES: the first row always, so a page overshoots
 * by at most one row and one row larger than the budget still moves. One running sum in key order
 * (`key` orders the rows exactly as the CTE's own limit did).
 */
export function byteCut(sized: string, key: string | readonly string[]): string {
  // A key may carry its direction ('created_at desc'): the page's own order, column by column.
  const order = (typeof key === 'string' ? [key] : key).map((k) => `s.${k}`).join(', ');
  return `select b.* from (
    select s.*, sum(s.sz) over (order by ${order} rows between unbounded preceding and current row) as through_bytes
    from ${sized} s
  ) b where b.through_bytes = b.sz or b.through_bytes - b.sz < ${READ_PAGE_BYTES}`;
}

/** A row of a byte-cut page: `page_rows` is how many rows the row limit fetched (before the cut). */
export interface ByteCutRow {
  page_rows: string | number | null;
}

/**
 * toPage for a byte-cut page: more rows follow exactly when fewer were returned than the row limit
 * fetched (limit + 1 fetched, or the byte budget cut the rest), so no empty page is ever issued.
 */
export function toByteCutPage<R extends ByteCutRow, T, K>(
  rows: R[],
  limit: number,
  present: (r: R) => boolean,
  item: (r: R) => T,
  key: (r: R) => K,
): KeyedPage<T, K> | null {
  return pageOf(rows, limit, present, item, key, () => Number(rows[0]?.page_rows ?? 0));
}
