/**
 * The hub's logger (src/hub/log.ts): a field cannot take over the line's ts, level or msg, and a
 * field JSON cannot write (a BigInt, a cycle, a throwing getter) never throws into the caller,
 * which may be the runtime's webSocketMessage handler; the line still goes out.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/hub/log';

let out: string[] = [];
beforeEach(() => {
  out = [];
  for (const k of ['log', 'warn', 'error'] as const) vi.spyOn(console, k).mockImplementation((line: string) => void out.push(line));
});
afterEach(() => vi.restoreAllMocks());

describe('hub log lines', () => {
  it('a field named level, msg or ts does not replace them, and the line starts with ts', () => {
    createLogger({ component: 't' }).error('POISON FRAME', { level: 'debug', msg: 'nothing to see', ts: 'then', seq: 3 });
    expect(out).toHaveLength(1);
    expect(out[0]?.startsWith('{"ts":')).toBe(true);
    const line = JSON.parse(out[0] as string) as Record<string, unknown>;
    expect(line).toMatchObject({ level: 'error', msg: 'POISON FRAME', component: 't', seq: 3 });
    expect(line.ts).not.toBe('then');
  });

  it('a BigInt, a cycle or a throwing getter in the fields never throws; the line is still written', () => {
    const log = createLogger({ component: 't' });
    const cycle: Record<string, unknown> = { a: 1 };
    cycle.self = cycle;
    expect(() => log.warn('big', { n: 10n, seq: 1 })).not.toThrow();
    expect(() => log.warn('cycle', { cycle, seq: 2 })).not.toThrow();
    const hostile = Object.defineProperty({}, 'x', { enumerable: true, get: () => { throw new Error('no'); } });
    expect(() => log.warn('getter', hostile as Record<string, unknown>)).not.toThrow();
    const lines = out.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => l.msg)).toEqual(['big', 'cycle', 'getter']);
    expect(lines[0]).toMatchObject({ level: 'warn', n: '10', seq: 1 });
    expect(lines[1]).toMatchObject({ level: 'warn', seq: 2, cycle: expect.stringMatching(/unwritable/) });
    expect(lines[2]).toMatchObject({ level: 'warn', log_error: expect.any(String) });
  });
});
