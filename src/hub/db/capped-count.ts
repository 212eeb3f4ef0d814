/**
 * The most a count that an operator can grow without bound (rejections: one row per poison frame,
 * kept 30 days; connection changes: one per reconnect) is counted up to in the admin views. Counted
 * whole, a token holder or a broken operator release sending bad frames for an hour made the count
 * alone pass the statement timeout, and with it the cluster list, the cluster's view and the fleet
 * view, for every cluster on that page.
 */
export const COUNT_CAP = 10_000;

/** SQL for how many rows `rows` (a FROM … WHERE … clause's body) holds, counted up to `cap`. */
export function cappedCount(rows: string, cap: number = COUNT_CAP): string {
  return `(select count(*) from (select 1 from ${rows} limit ${cap}) capped)`;
}
