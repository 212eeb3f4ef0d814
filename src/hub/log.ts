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

export function createLogger(base: LogFields = {}, minLevel: LogLevel = 'info'): Logger {
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (LEVELS[level] < LEVELS[minLevel]) return;
    const line = JSON.stringify({ ts: new Date().toISOString(), level, msg, ...base, ...fields });
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
