/**
 * Transient or permanent? Transient failure withholds the ack (a replay could succeed);
 * permanent failure accepts and drops (a replay never could). Unsure means transient: a replay
 * loop is at least visible.
 */
export type FailureClass = 'transient' | 'permanent';

// SQLSTATE classes that describe the data, not the database's condition.
const PERMANENT_CLASSES = new Set(['21', '22', '23']);

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

// A lock not granted in time, a statement timeout, a serialization failure or a deadlock: one
// frame's row can cause these, so the ingest pipeline isolates the frame instead of stalling
// every frame behind it.
const ISOLATABLE_STATES = new Set(['55P03', '57014', '40001', '40P01']);

/** A transient failure that one frame's subject may have caused (see ISOLATABLE_STATES). */
export function isIsolatable(err: unknown): boolean {
  const state = sqlState(err);
  return state !== null && ISOLATABLE_STATES.has(state);
}

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
