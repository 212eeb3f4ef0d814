/**
 * SQL for "this cluster's owning session is connected now", as every admin view decides it: the
 * owner row `o` says connected, and there has been news of it within the stale-after window
 * (`staleMs`, a parameter: config.ts `connectedStaleAfterMs`). News is the session's own check
 * (`cluster_owners.polled_at`) or the fleet poll recording that it answered a sweep
 * (`live_sessions.checked_at`): an idle session sleeps and answers only sweeps, with no statement
 * of its own.
 */
export function connectedSql(o: string, staleMs: string): string {
  return `(${o}.connected and greatest(${o}.polled_at, (select s.checked_at from live_sessions s where s.session_id = ${o}.session_id))
    > now() - make_interval(secs => ${staleMs}::double precision / 1000))`;
}
