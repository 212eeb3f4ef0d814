/**
 * A budget for log lines a peer can provoke at will (a poison frame, an unknown type, an error
 * frame, a connect with an unknown token). Each such line is worth writing, but one per frame
 * lets a single misbehaving or hostile operator write as fast as it can send: the logs bill and
 * the pipeline's rate limits are then spent on it, and everyone else's lines are lost in it.
 *
 * Per kind, the first LOG_BUDGET.lines lines of a window are written at full detail; the rest
 * are counted. The first line held back says so (one line), and a summary (how many, the first
 * and last seq, the last reason) is written when the window has passed (at the next line of that
 * kind, or when the owner calls `flush`: the session at its end and at its alarms). Nothing here
 * keeps its own timer: an idle session must be able to sleep. The durable record of each frame
 * is elsewhere (the rejections table, the session's counters); this only bounds the log.
 */
import type { Logger, LogLevel } from './log';

/** Lines per kind per window at full detail; documented in README (Logs). */
export const LOG_BUDGET = { lines: 20, windowMs: 60_000 } as const;

/** How many distinct kinds one budget tracks (a kind is a fixed name or a short reason code). */
const MAX_KINDS = 64;

interface Window {
  level: LogLevel;
  msg: string;
  startedAt: number;
  written: number;
  suppressed: number;
  firstSeq: number | null;
  lastSeq: number | null;
  lastReason: string | null;
}

export interface BudgetedLine {
  /** What kind of line this is; the budget is per kind. */
  kind: string;
  level: LogLevel;
  msg: string;
  fields: Record<string, unknown>;
  /** For the summary of the lines held back. */
  seq?: number | null;
  reason?: string | null;
}

export class LogBudget {
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly lines: number = LOG_BUDGET.lines,
    private readonly windowMs: number = LOG_BUDGET.windowMs,
    private readonly now: () => number = Date.now,
  ) {}

  /** Write `line` to `log` if the budget allows; otherwise count it for the summary. */
  write(log: Logger, line: BudgetedLine): void {
    const now = this.now();
    let w = this.windows.get(line.kind);
    if (w && now - w.startedAt >= this.windowMs) {
      this.summarise(log, line.kind, w);
      w = undefined;
    }
    if (!w) {
      if (this.windows.size >= MAX_KINDS) this.flush(log, true);
      w = { level: line.level, msg: line.msg, startedAt: now, written: 0, suppressed: 0, firstSeq: null, lastSeq: null, lastReason: null };
      this.windows.set(line.kind, w);
    }
    if (w.written < this.lines) {
      w.written++;
      log[line.level](line.msg, line.fields);
      return;
    }
    if (w.suppressed === 0) {
      // Said once, at once: the summary itself may be lost if the object is evicted first.
      log[line.level](`${line.msg} (further lines of this kind held back)`, {
        budget: line.kind,
        logged: w.written,
        window_ms: this.windowMs,
        until: new Date(w.startedAt + this.windowMs).toISOString(),
      });
    }
    w.suppressed++;
    w.firstSeq ??= line.seq ?? null;
    w.lastSeq = line.seq ?? w.lastSeq;
    w.lastReason = line.reason ?? w.lastReason;
  }

  /** Summarise the windows that have passed (all of them when `final`: the session ends). */
  flush(log: Logger, final = false): void {
    const now = this.now();
    for (const [kind, w] of this.windows) {
      if (final || now - w.startedAt >= this.windowMs) this.summarise(log, kind, w);
    }
  }

  private summarise(log: Logger, kind: string, w: Window): void {
    this.windows.delete(kind);
    if (w.suppressed === 0) return;
    log[w.level](`${w.msg} (summary of lines held back)`, {
      budget: kind,
      suppressed: w.suppressed,
      logged: w.written,
      first_seq: w.firstSeq,
      last_seq: w.lastSeq,
      last_reason: w.lastReason,
      window_started: new Date(w.startedAt).toISOString(),
    });
  }
}
