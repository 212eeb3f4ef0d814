import { describe, expect, it } from 'vitest';
import { jsonLogger, makeLogger } from '../../../src/operator';

describe('SDK logger', () => {
  it('writes one JSON line per record, bound fields and level filter applied', () => {
    const lines: string[] = [];
    const log = jsonLogger({ write: (l) => lines.push(l), now: () => Date.UTC(2026, 11, 5, 3, 0, 0, 1), level: 'info', fields: { cluster: 'c1' } });
    log.child({ session: 's1' }).info('hello', { seq: 7, err: new Error('boom') });
    log.debug('not written');
    expect(lines).toHaveLength(1);
    const rec = JSON.parse(lines[0] as string);
    expect(rec).toMatchObject({ time: '2026-12-05T03:00:00.001Z', level: 'info', msg: 'hello', cluster: 'c1', session: 's1', seq: 7, err: { name: 'Error', message: 'boom' } });
  });

  it('a clock no Date can hold is written as it read, not thrown into the caller', () => {
    for (const reading of [Number.NaN, 8.64e15 + 1, Number.POSITIVE_INFINITY]) {
      const lines: string[] = [];
      const log = jsonLogger({ write: (l) => lines.push(l), now: () => reading });
      expect(() => log.warn('link lost', { seq: 1 })).not.toThrow();
      expect(JSON.parse(lines[0] as string)).toMatchObject({ time: `invalid clock reading: ${String(reading)}`, level: 'warn', msg: 'link lost', seq: 1 });
    }
  });

  it('fields that cannot be serialised still give a line, with a note', () => {
    const lines: string[] = [];
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    const log = jsonLogger({ write: (l) => lines.push(l), now: () => 0 });
    log.error('odd fields', { big: 10n });
    log.error('odd fields', { circular });
    expect(lines.map((l) => JSON.parse(l))).toEqual([
      { time: '1970-01-01T00:00:00.000Z', level: 'error', msg: 'odd fields', note: 'fields not serializable' },
      { time: '1970-01-01T00:00:00.000Z', level: 'error', msg: 'odd fields', note: 'fields not serializable' },
    ]);
  });

  it('a sink that throws drops the line instead of failing the caller', () => {
    let calls = 0;
    const log = makeLogger(() => {
      calls++;
      throw new Error('stream closed');
    });
    expect(() => log.error('frame rejected', { seq: 3 })).not.toThrow();
    const json = jsonLogger({
      write: () => {
        throw new Error('EPIPE');
      },
    });
    expect(() => json.info('still fine')).not.toThrow();
    expect(calls).toBe(1);
  });
});
