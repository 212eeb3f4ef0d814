/**
 * How a statement on a hub connection failed (pg.ts raises these), and whether it may still
 * commit: what decides between withholding, retrying and closing for a replay.
 */
import { isCodeError, sqlState } from './db/errors';

/**
 * Raised for a query that outlived its deadline, counted from when it was asked for (time queued
 * behind other statements on the connection included). A query still queued is taken out of the
 * queue and never runs; the connection is discarded only when it made no progress for a whole
 * deadline (a stalled link or database), not when it is merely busy.
 */
export class QueryTimeoutError extends Error {
  override readonly name = 'QueryTimeoutError';
  constructor(ms: number) {
    super(`query exceeded ${ms} ms`);
  }
}

/**
 * Whether a failed statement may still commit later: one we stopped waiting for, or one whose
 * connection ended under it. Its bytes may be on their way (a half-dead path that heals delivers
 * them; `statement_timeout` counts only from their arrival), or it may be running on the server,
 * which notices a closed connection only when it answers, after its commit. Either way it may
 * commit after a retry of the same frames on a new connection, and after newer ones. Every other
 * failure is the server's answer (an error it sends aborts the statement) or a statement never sent.
 */
export function outcomeUnknown(err: unknown): boolean {
  return err instanceof QueryTimeoutError || (err instanceof ConnectionLostError && err.sent);
}

/**
 * Raised when the connection died under a query (`sent`), or could not be opened. When the server
 * itself refused the connection it carries the server's SQLSTATE (`code`): a role that does not exist
 * (28000), a wrong password (28P01), a database that does not exist (3D000) are faults someone
 * must fix, not an outage, and the log says so (failureKind). Retrying is still decided by
 * classifyDbError, which treats every such code as transient: a fix may come without a restart.
 */
export class ConnectionLostError extends Error {
  override readonly name = 'ConnectionLostError';
  readonly code: string | undefined;

  constructor(
    message: string,
    code?: string | null,
    /** The statement had been handed to the connection: it may have reached the server (outcomeUnknown). */
    readonly sent = false,
  ) {
    super(message);
    this.code = code ?? undefined;
  }
}

/** The driver's refusals of a statement on a client already closed or failed: never sent. */
const NOT_SENT = new Set(['Client was closed and is not queryable', 'Client has encountered a connection error and is not queryable']);

/**
 * The connection ended with the statement on it: no answer of the server's (which carries a
 * SQLSTATE), no programming error raised before it was sent, no refusal of a dead client. Unsure
 * counts as lost: a retry that could be overwritten costs more than a reconnect. A connection
 * exception (class 08) is not the server's answer to the statement: a pooler between (PgBouncer,
 * Neon's pooled host) reports its lost server connection so ("08P01 server conn crashed?"), after
 * the statement may have committed.
 */
export function lostUnder(err: unknown): boolean {
  const state = sqlState(err);
  if (state !== null && state.startsWith('08')) return true;
  if (state !== null || isCodeError(err)) return false;
  return !(err instanceof Error && NOT_SENT.has(err.message));
}
