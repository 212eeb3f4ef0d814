import type { Sql } from './sql';

/** What one pass deleted, per table; `full`: some table had more due than one batch. */
export interface HistoryPruned {
  events: number;
  rejections: number;
  operationEvents: number;
  operations: number;
  full: boolean;
}

/** How far back each kind of row is kept, in ms (HISTORY_RETENTION_MS, OPERATIONS_RETENTION_MS). */
export interface Retention {
  historyMs: number;
  operationsMs: number;
}

/**
 * One pass of history retention: at most `batch` rows of each history table older than
 * `retention.historyMs` — events and rejections by arrival, an operation's progress reports once the
 * operation concluded before the horizon, or passed its deadline before it without concluding
 * (the operator may keep reporting on such an operation; its history must not outlive every
 * horizon). The operation itself (its row, state and idempotency key) goes at its own
 * horizon (`retention.operationsMs`), and only once none of its history is left: the cascade to its reports then deletes
 * nothing, so the pass stays bounded by `batch` however much an operator reported. Bounded so that a
 * backlog (a first run after an upgrade, a poisoning operator's millions of rejections) is worked
 * off over several passes, none holding locks or a connection for long. Idempotent: pollers of
 * several shards may run it at once, and a row two of them pick is deleted once.
 *
 * Oldest first, by the btree on the arrival time (0023): the horizon is a scalar subquery, so it
 * is the index scan's bound (as a join with the CTE it was only a filter), and the order gives
 * the planner a scan it can stop after `batch` rows. A pass with nothing due reads a few index
 * pages; before, it read the whole of events and every operation ever concluded (bench/MICRO.md).
 */
export async function pruneHistory(sql: Sql, retention: Retention, batch: number): Promise<HistoryPruned> {
  const { rows } = await sql.query<{ events: number; rejections: number; operation_events: number; operations: number }>(
    `with horizon as (select now() - make_interval(secs => $1::double precision / 1000) as t),
     op_horizon as (select now() - make_interval(secs => $3::double precision / 1000) as t),
     ev as (
       delete from events where ctid = any(array(
         select e.ctid from events e where e.received_at < (select t from horizon) order by e.received_at limit $2))
       returning 1
     ), rj as (
       delete from rejections where id = any(array(
         select r.id from rejections r, horizon h where r.received_at < h.t limit $2))
       returning 1
     ), oe as (
       delete from operation_events where ctid = any(array(
         select e.ctid from operation_events e join operations o using (operation_id)
         where e.at < (select t from horizon) and coalesce(o.concluded_at, o.deadline) < (select t from horizon)
         order by e.at limit $2))
       returning 1
     ), op as (
       -- The reports oe deletes are still seen here (one snapshot): their operation goes next pass.
       -- An operation a session's statement holds (a report's insert checks its key) is skipped:
       -- waited for, its delete would go ahead once that commits, the report unseen by this
       -- snapshot, and take the acknowledged report with it (the cascade).
       delete from operations where operation_id = any(array(
         select o.operation_id from operations o
         where coalesce(o.concluded_at, o.deadline) < (select t from op_horizon)
           and not exists (select 1 from operation_events e where e.operation_id = o.operation_id)
         order by coalesce(o.concluded_at, o.deadline) limit $2
         for update skip locked))
       returning 1
     )
     select (select count(*) from ev)::int as events, (select count(*) from rj)::int as rejections,
            (select count(*) from oe)::int as operation_events, (select count(*) from op)::int as operations`,
    [retention.historyMs, batch, retention.operationsMs],
    'wingsmith_history_prune_v5',
  );
  const r = rows[0] ?? { events: 0, rejections: 0, operation_events: 0, operations: 0 };
  return {
    events: r.events,
    rejections: r.rejections,
    operationEvents: r.operation_events,
    operations: r.operations,
    full: r.events >= batch || r.rejections >= batch || r.operation_events >= batch || r.operations >= batch,
  };
}
