/**
 * Structured logging: one JSON object per line (`time`, `level`, `msg`, then the bound fields
 * such as `cluster`, `session`, `seq`, `type`). The SDK only talks to the `Logger` interface so
 * an operator can route its lines wherever its cluster ships logs.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line. */
  child(fields: LogFields): Logger;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface LogRecord extends LogFields {
  level: LogLevel;
  msg: string;
}

/** A logger built on one sink function; everything else is derived. */
export function makeLogger(sink: (record: LogRecord) => void, bound: LogFields = {}, minLevel: LogLevel = 'debug'): Logger {
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (RANK[level] < RANK[minLevel]) return;
    // A log line is never worth a frame: the SDK logs from inside its frame handling and timers,
    // where a throw from the sink (a closed stream, a caller's own sink) would fail the work it
    // was describing. The line is dropped instead.
    try {
      sink({ ...bound, ...normalize(fields), level, msg });
    } catch {
      // dropped
    }
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => makeLogger(sink, { ...bound, ...fields }, minLevel),
  };
}

// Error objects stringify to {}: keep what helps a human find the cause.
function normalize(fields: LogFields | undefined): LogFields {
  if (!fields) return {};
  const out: LogFields = {};
  for (const [k, v] of Object.entries(fields)) {
    out[k] = v instanceof Error ? { name: v.name, message: v.message, stack: v.stack } : v;
  }
  return out;
}

export interface JsonLoggerOptions {
  level?: LogLevel;
  /** Where each line goes; stderr by default so stdout stays free for a program's output. */
  write?: (line: string) => void;
  now?: () => number;
  fields?: LogFields;
}

/** One JSON object per line. */
export function jsonLogger(options: JsonLoggerOptions = {}): Logger {
  const write = options.write ?? ((line: string) => process.stderr.write(line + '\n'));
  const now = options.now ?? Date.now;
  return makeLogger(
    ({ level, msg, ...rest }) => {
      const time = isoTime(now());
      let line: string;
      try {
        line = JSON.stringify({ time, level, msg, ...rest });
      } catch {
        line = JSON.stringify({ time, level, msg, note: 'fields not serializable' });
      }
      write(line);
    },
    options.fields ?? {},
    options.level ?? 'info',
  );
}

/** A clock reading as RFC 3339; one no Date can hold (NaN, out of range) is written as it read. */
function isoTime(ms: number): string {
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? `invalid clock reading: ${String(ms)}` : d.toISOString();
}

export const silentLogger: Logger = makeLogger(() => {}, {}, 'error');

/** Keeps every record in memory: for tests, and for embedding applications that want to inspect. */
export function memoryLogger(): Logger & { records: LogRecord[] } {
  const records: LogRecord[] = [];
  return Object.assign(makeLogger((r) => records.push(r)), { records });
}
