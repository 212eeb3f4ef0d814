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
  if (rows.length === 0) return null;
  const hits = rows.filter(present);
  const page = hits.slice(0, limit);
  const last = page[page.length - 1];
  return { items: page.map(item), next: hits.length > limit && last !== undefined ? key(last) : null };
}

export const num = (v: string | number): number => Number(v);
export const numOrNull = (v: string | number | null): number | null => (v === null ? null : Number(v));

