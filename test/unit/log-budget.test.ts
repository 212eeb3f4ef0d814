/**
 * The per-kind log budget (src/hub/log-budget.ts): the first N lines of a kind in a window are
 * written whole, the first one held back says so, and the rest are summarised (count, first and
 * last seq, last reason) when the window has passed or the owner flushes at the session's end.
 */
import { describe, expect, it } from 'vitest';
import type { Logger, LogFields } from '../../src/hub/log';
import { LogBudget } from '../../src/hub/log-budget';

function recorder(): { log: Logger; lines: ({ level: string; msg: string } & LogFields)[] } {
  const lines: ({ level: string; msg: string } & LogFields)[] = [];
  const at = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ ...fields, level, msg });
  const log: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return { log, lines };
}

describe('log budget', () => {
  it('writes the first N lines of a kind, says once that it holds back, then summarises when the window passes', () => {
    let now = 0;
    const budget = new LogBudget(3, 60_000, () => now);
    const { log, lines } = recorder();
    for (let seq = 1; seq <= 10; seq++) budget.write(log, { kind: 'poison', level: 'error', msg: 'POISON FRAME', fields: { seq }, seq, reason: `r${seq}` });
    expect(lines.map((l) => l.msg)).toEqual(['POISON FRAME', 'POISON FRAME', 'POISON FRAME', 'POISON FRAME (further lines of this kind held back)']);
    budget.flush(log);
    expect(lines).toHaveLength(4);
    now = 60_000;
    budget.flush(log);
    expect(lines[4]).toMatchObject({ level: 'error', msg: 'POISON FRAME (summary of lines held back)', budget: 'poison', suppressed: 7, logged: 3, first_seq: 4, last_seq: 10, last_reason: 'r10' });
    // A new window: full detail again.
    budget.write(log, { kind: 'poison', level: 'error', msg: 'POISON FRAME', fields: { seq: 11 }, seq: 11 });
    expect(lines[5]).toMatchObject({ msg: 'POISON FRAME', seq: 11 });
  });

  it('kinds have budgets of their own; a window that rolls at the next line summarises first; a final flush summarises everything', () => {
    let now = 0;
    const budget = new LogBudget(1, 1_000, () => now);
    const { log, lines } = recorder();
    budget.write(log, { kind: 'a', level: 'warn', msg: 'A', fields: {} });
    budget.write(log, { kind: 'b', level: 'warn', msg: 'B', fields: {} });
    budget.write(log, { kind: 'a', level: 'warn', msg: 'A', fields: {}, seq: 2 });
    budget.write(log, { kind: 'b', level: 'warn', msg: 'B', fields: {}, seq: 5 });
    expect(lines.map((l) => l.msg)).toEqual(['A', 'B', 'A (further lines of this kind held back)', 'B (further lines of this kind held back)']);
    now = 1_000;
    budget.write(log, { kind: 'a', level: 'warn', msg: 'A', fields: {} });
    expect(lines.slice(4).map((l) => l.msg)).toEqual(['A (summary of lines held back)', 'A']);
    budget.flush(log, true);
    expect(lines.slice(6)).toEqual([expect.objectContaining({ msg: 'B (summary of lines held back)', suppressed: 1, first_seq: 5 })]);
    budget.flush(log, true);
    expect(lines).toHaveLength(7);
  });
});
