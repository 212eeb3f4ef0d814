/** Structured JSON logs: one object per line, with cluster, session and seq where they apply. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface LogFields {
  cluster?: string | null;
  session?: string | null;
  seq?: number | null;
  [key: string]: unknown;
}

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/**
 * One line of JSON. ts, level and msg first for a reader, and written after the fields so that a
 * field of the same name cannot replace them. Never throws: logging runs inside the runtime's
 * handlers (webSocketMessage), where a throw from a log line would abandon the frame's work. A
 * field JSON cannot write (a BigInt, a cycle) is replaced by what it was, and the line still goes out.
 */
export function formatLine(level: LogLevel, msg: string, fields: LogFields): string {
  const head = { ts: new Date().toISOString(), level, msg };
  try {
    return JSON.stringify({ ...head, ...fields, ...head });
  } catch {
    const safe: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(fields)) safe[k] = writable(v);
    safe.log_error = 'a field could not be written as JSON';
    return JSON.stringify({ ...head, ...safe, ...head });
  }
}

function writable(v: unknown): unknown {
  try {
    JSON.stringify(v);
    return v;
  } catch {
    return typeof v === 'bigint' ? v.toString() : `[unwritable ${typeof v}]`;
  }
}

export function createLogger(base: LogFields = {}, minLevel: LogLevel = 'info'): Logger {
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (LEVELS[level] < LEVELS[minLevel]) return;
    let line: string;
    try {
      line = formatLine(level, msg, { ...base, ...fields });
    } catch {
      // A field whose getter throws: the line still says what happened.
      line = JSON.stringify({ ts: new Date().toISOString(), level, msg, log_error: 'the fields of this line could not be read' });
    }
    if (level === 'error') console.error(line);
    else if (level === 'warn') console.warn(line);
    else console.log(line);
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => createLogger({ ...base, ...fields }, minLevel),
  };
}
