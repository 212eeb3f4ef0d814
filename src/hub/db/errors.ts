/**
 * Transient or permanent? Transient failure withholds the ack (a replay could succeed);
 * permanent failure accepts and drops (a replay never could). Unsure means transient: a replay
 * loop is at least visible.
 */
export type FailureClass = 'transient' | 'permanent';

// SQLSTATE classes that describe the data, not the database's condition: cardinality (21), data
// (22), integrity (23), and a program limit the data ran into (54: a value larger than jsonb
// holds, say), which no retry of the same data passes either.
const PERMANENT_CLASSES = new Set(['21', '22', '23', '54']);

export function sqlState(err: unknown): string | null {
  if (err && typeof err === 'object' && 'code' in err) {
    const code = (err as { code: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return null;
}

export function classifyDbError(err: unknown): FailureClass {
  const state = sqlState(err);
  if (state && PERMANENT_CLASSES.has(state.slice(0, 2))) return 'permanent';
  return 'transient';
}

// A statement rolled back for what ran beside it: a serialization failure (40001, under a stricter
// default isolation), a deadlock (40P01), a lock not granted in time (55P03).
const CONCURRENCY_STATES = new Set(['40001', '40P01', '55P03']);
// Those, or a statement timeout: one frame's row can cause these, so the ingest pipeline isolates
// the frame instead of stalling every frame behind it.
const ISOLATABLE_STATES = new Set([...CONCURRENCY_STATES, '57014']);

/** A transient failure that one frame's subject may have caused (see ISOLATABLE_STATES). */
export function isIsolatable(err: unknown): boolean {
  const state = sqlState(err);
  return state !== null && ISOLATABLE_STATES.has(state);
}

// A statement or connection the database refused for what it says (a missing table or column,
// a syntax or permission error, a role or password it does not know (28), a database that does
// not exist (3D)), not for its condition: retrying waits on a deploy, a migration or a fixed
// DATABASE_URL, not on the database coming back.
const STATEMENT_CLASSES = new Set(['42', '0A', '3F', '28', '3D']);
// A write refused by a database that takes none (25006: a read replica's URL, or
// default_transaction_read_only set on the database or role): it waits on a fixed DATABASE_URL too.
const STATEMENT_STATES = new Set(['25006']);
// What JavaScript throws for a programming error, locally or relayed by name from a gateway shard.
const CODE_ERRORS = new Set(['TypeError', 'ReferenceError', 'SyntaxError', 'RangeError', 'EvalError', 'URIError', 'ResidencyError']);

/**
 * Why a database call failed, for the log: the database or the way to it is unavailable (an
 * outage, retry), or the call itself is wrong (a bug, a schema behind the code, a misplaced
 * deployment), which no retry mends and someone must look at.
 */
export function failureKind(err: unknown): 'outage' | 'fault' {
  const state = sqlState(err);
  if (state) return STATEMENT_CLASSES.has(state.slice(0, 2)) || STATEMENT_STATES.has(state) ? 'fault' : 'outage';
  return isCodeError(err) ? 'fault' : 'outage';
}

/** A programming error (by its name, as a gateway shard relays it too), not the database's doing. */
export function isCodeError(err: unknown): boolean {
  const name = err && typeof err === 'object' && 'name' in err ? (err as { name: unknown }).name : null;
  return typeof name === 'string' && CODE_ERRORS.has(name);
}

/** What a log line says of a fault, wherever one is logged. */
export const NOT_AN_OUTAGE = 'not an outage (a code or schema fault)';

/** The log line for a failed database call: a fault loudly, an outage as a warning. */
export function failureLine(what: string, err: unknown): { level: 'error' | 'warn'; message: string; fields: { error: string } } {
  const fields = { error: describeError(err) };
  if (failureKind(err) === 'fault') return { level: 'error', message: `${what} failed: ${NOT_AN_OUTAGE}`, fields };
  // The database answered, and refused only this statement for what ran beside it: calling that
  // an outage sends whoever reads the log to look for one.
  const state = sqlState(err);
  if (state !== null && CONCURRENCY_STATES.has(state)) return { level: 'warn', message: `${what} failed: ${CONCURRENT_WORK}`, fields };
  return { level: 'warn', message: `${what} failed: database unavailable`, fields };
}

export const CONCURRENT_WORK = 'conflicted with concurrent work (rolled back whole; safe to retry)';

export function describeError(err: unknown): string {
  const state = sqlState(err);
  return state ? `${state}: ${messageOf(err)}` : messageOf(err);
}

/** Errors from WebSockets arrive as ErrorEvents, not Errors: dig out what they say. */
function messageOf(err: unknown): string {
  // The driver stringifies the socket's ErrorEvent into its own Error, which says nothing.
  if (err instanceof Error) return err.message === '[object ErrorEvent]' ? 'database socket error (connection refused or lost)' : err.message;
  if (err && typeof err === 'object') {
    const e = err as { message?: unknown; error?: unknown; type?: unknown };
    if (typeof e.message === 'string' && e.message) return e.message;
    if (e.error instanceof Error) return e.error.message;
    if (typeof e.type === 'string') return `${e.type} event`;
  }
  return String(err);
}
