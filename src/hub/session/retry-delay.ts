/**
 * The delay before the next try of something a session retries on its own after `failures`
 * failures: doubling from the fleet poll's interval (the poll being the other way the session
 * would hear of it), capped at 30 s, with half of it jittered so sessions that failed together do
 * not retry together.
 */
export function sessionRetryDelay(pollIntervalMs: number, failures: number): number {
  const base = Math.min(30_000, pollIntervalMs * 2 ** Math.min(failures, 16));
  return Math.round(base / 2 + (Math.random() * base) / 2);
}
