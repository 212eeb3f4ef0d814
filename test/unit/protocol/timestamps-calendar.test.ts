import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodePayload, decodePayloadWithZod, namesTime, readFrame } from '../../../src/protocol';

const base = {
  v: 1,
  type: 'node.removed',
  id: '01J9X2E5G7QK8V3B0YHN4TZC6M',
  seq: 7,
  ack: 3,
  reply_to: null,
  ts: '2026-08-19T14:02:11.482Z',
  payload: { node_id: 'n1' },
};
const frame = (ts: string) => readFrame(JSON.stringify({ ...base, ts }));

const event = (occurred_at: string) => ({ subject: 'n1', reason: 'r', message: '', severity: 'info', occurred_at });

describe('timestamps name a real calendar time', () => {
  it('a day past the end of its month is refused (Date.parse would roll Feb 31 over to Mar 3)', () => {
    for (const s of ['2026-02-29T00:00:00.000Z', '2026-02-31T00:00:00.000Z', '2026-04-31T12:00:00.000Z', '1900-02-29T00:00:00.000Z']) {
      expect(namesTime(s), s).toBe(false);
    }
    for (const s of ['2028-02-29T00:00:00.000Z', '2000-02-29T00:00:00.000Z', '2026-01-31T23:59:59.999Z', '2026-12-31T00:00:00Z']) {
      expect(namesTime(s), s).toBe(true);
    }
  });

  it('hour 24 is refused (RFC 3339 hours run 00 to 23; Date.parse reads 24:00 as the next midnight)', () => {
    expect(namesTime('2026-01-01T24:00:00.000Z')).toBe(false);
    expect(namesTime('2026-01-01T23:00:00.000Z')).toBe(true);
  });

  it('a ts on a day that does not exist makes a poison frame', () => {
    expect(frame('2026-02-31T00:00:00.000Z').kind).toBe('poison');
    expect(frame('2026-01-01T24:00:00.000Z').kind).toBe('poison');
  });

  it('an event occurred_at on a day that does not exist is refused by zod and by the fast validator alike', () => {
    for (const s of ['2026-02-30T00:00:00.000Z', '2026-06-31T00:00:00.000Z', '2026-01-01T24:00:00.000Z']) {
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(false);
      expect(decodePayload('node.event', event(s)).ok, s).toBe(false);
    }
  });

  it('every toISOString time from year 0 to 9999 still names a time', () => {
    fc.assert(
      fc.property(fc.integer({ min: -62167219200000, max: 253402300799999 }), (ms) => namesTime(new Date(ms).toISOString())),
      { numRuns: 2000 },
    );
  });
});
