import { describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import {
  answerableId,
  buildFrame,
  canonicalPing,
  canonicalPong,
  decodeEnvelope,
  encodeEnvelope,
  ENVELOPE_VERSION,
  isSequencedType,
  MIN_ENVELOPE_VERSION,
  namesTime,
  namesTimeByParse,
  newId,
  timestamp,
  readFrame,
  ULID_RE,
  decodePayload,
  decodePayloadWithZod,
} from '../../../src/protocol';

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
const text = (o: object) => JSON.stringify(o);

describe('envelope', () => {
  it('today both the written and the oldest read envelope version are 1', () => {
    expect(ENVELOPE_VERSION).toBe(1);
    expect(MIN_ENVELOPE_VERSION).toBe(1);
  });

  it('every frame is a single JSON object: bare payloads, arrays and non-JSON are fatal', () => {
    for (const bad of ['[]', '"hello"', '42', 'null', '{not json', '']) {
      const r = decodeEnvelope(bad);
      expect(r.ok, bad).toBe(false);
    }
  });

  it('a frame whose v falls outside [min, current] is fatal', () => {
    expect(decodeEnvelope(text({ ...base, v: 0 })).ok).toBe(false);
    expect(decodeEnvelope(text({ ...base, v: ENVELOPE_VERSION + 1 })).ok).toBe(false);
    expect(decodeEnvelope(text({ ...base, v: '1' })).ok).toBe(false);
    expect(decodeEnvelope(text(base)).ok).toBe(true);
  });

  it('a sequenced frame without a usable seq cannot be sequenced and is fatal', () => {
    expect(decodeEnvelope(text({ ...base, seq: null })).ok).toBe(false);
    expect(decodeEnvelope(text({ ...base, seq: 0 })).ok).toBe(false);
    expect(decodeEnvelope(text({ ...base, seq: 1.5 })).ok).toBe(false);
    expect(decodeEnvelope(text({ ...base, seq: -1 })).ok).toBe(false);
  });

  it('hello, welcome, ping, pong and ack carry no seq; everything else is sequenced, stream.end included', () => {
    for (const t of ['hello', 'welcome', 'ping', 'pong', 'ack']) expect(isSequencedType(t)).toBe(false);
    for (const t of ['stream.end', 'resync.begin', 'error', 'node.observed', 'recipe.desired']) {
      expect(isSequencedType(t)).toBe(true);
    }
    const ping = decodeEnvelope(text({ ...base, type: 'ping', seq: 12, payload: {} }));
    expect(ping.ok && ping.envelope.seq).toBe(null);
  });

  it('unknown fields are ignored on receipt, in the envelope and in the payload', () => {
    const r = readFrame(text({ ...base, extra: 1, payload: { node_id: 'n1', utilization: 0.93 } }));
    expect(r.kind).toBe('message');
    if (r.kind !== 'message') return;
    expect(r.message.payload).toEqual({ node_id: 'n1' });
    expect('extra' in r.envelope).toBe(false);
  });

  it('an unknown type is never fatal: it decodes as unknown, keeping its seq', () => {
    const r = readFrame(text({ ...base, type: 'recipe.desired', payload: { recipe_id: 'x' } }));
    expect(r.kind).toBe('unknown');
    if (r.kind === 'unknown') expect(r.envelope.seq).toBe(7);
  });

  it('only the envelope is fatal: a malformed payload is a poison frame, still sequenced', () => {
    const r = readFrame(text({ ...base, payload: { node_id: '' } }));
    expect(r.kind).toBe('poison');
    if (r.kind === 'poison') {
      expect(r.envelope.seq).toBe(7);
      expect(r.reason).toMatch(/node_id/);
    }
    expect(readFrame(text({ ...base, payload: [1, 2] })).kind).toBe('poison');
  });

  it('a malformed id, reply_to or ts makes a poison frame, not a dead connection', () => {
    expect(readFrame(text({ ...base, id: 'not-a-ulid' })).kind).toBe('poison');
    expect(readFrame(text({ ...base, reply_to: 'nope' })).kind).toBe('poison');
    expect(readFrame(text({ ...base, ts: 'yesterday' })).kind).toBe('poison');
  });

  it('an id, reply_to or ts that is not a string, or is overlong, is poison too; an empty or overlong type is an unknown one: none is fatal', () => {
    for (const over of [{ id: 5 }, { id: 'A'.repeat(65) }, { reply_to: 5 }, { reply_to: [] }, { ts: 0 }, { ts: {} }, { ts: '2'.repeat(65) }]) {
      const r = readFrame(text({ ...base, ...over }));
      expect(r.kind, JSON.stringify(over).slice(0, 40)).toBe('poison');
      expect(r.kind !== 'fatal' && r.envelope.seq).toBe(7);
    }
    // A ping or a pong may leave id and ts out (null), not fill them with something else.
    for (const type of ['ping', 'pong']) {
      for (const over of [{ id: 5 }, { id: {} }, { id: 'A'.repeat(65) }, { ts: 5 }, { ts: {} }]) {
        expect(readFrame(text({ ...base, type, seq: null, payload: {}, ...over })).kind, `${type} ${JSON.stringify(over).slice(0, 30)}`).toBe('poison');
      }
      expect(readFrame(text({ ...base, type, seq: null, id: null, ts: null, payload: {} })).kind).toBe('message');
    }
    for (const type of ['', 'x'.repeat(257)]) expect(readFrame(text({ ...base, type })).kind).toBe('unknown');
    expect(readFrame(text({ ...base, type: 5 })).kind).toBe('fatal');
  });

  it('a fatal decode still reports the frame id when it could be read, so the error can reply to it', () => {
    const r = decodeEnvelope(text({ ...base, v: 9 }));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.id).toBe(base.id);
  });

  it('buildFrame writes the current version, a ULID id and a millisecond RFC 3339 ts', () => {
    const f = JSON.parse(buildFrame({ type: 'ping', payload: {}, ack: 5, now: Date.UTC(2026, 0, 2, 3, 4, 5, 6) }));
    expect(f).toMatchObject({ v: 1, type: 'ping', seq: null, ack: 5, reply_to: null, ts: '2026-01-02T03:04:05.006Z' });
    expect(f.id).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
  });

  it('canonical ping and pong: one exact text per cursor, no id, no ts', () => {
    expect(canonicalPing(7)).toBe('{"v":1,"type":"ping","id":null,"seq":null,"ack":7,"reply_to":null,"ts":null,"payload":{}}');
    expect(canonicalPong(0)).toBe('{"v":1,"type":"pong","id":null,"seq":null,"ack":0,"reply_to":null,"ts":null,"payload":{}}');
    expect(() => canonicalPing(-1)).toThrow(RangeError);
    expect(() => canonicalPong(1.5)).toThrow(RangeError);
  });

  it('a ping or pong without id and ts decodes as a message, and encodes back to the same text', () => {
    for (const type of ['ping', 'pong']) {
      const canonical = `{"v":1,"type":"${type}","id":null,"seq":null,"ack":42,"reply_to":null,"ts":null,"payload":{}}`;
      const r = readFrame(canonical);
      expect(r.kind).toBe('message');
      if (r.kind !== 'message') continue;
      expect(r.message.type).toBe(type);
      expect(r.envelope.ack).toBe(42);
      expect(encodeEnvelope(r.envelope)).toBe(canonical);
    }
  });

  it('the old ping and pong, with an id and a ts, are still read (a peer one version behind)', () => {
    for (const type of ['ping', 'pong']) {
      const r = readFrame(buildFrame({ type: type as 'ping', payload: {}, ack: 3 }));
      expect(r.kind).toBe('message');
    }
  });

  it('only ping and pong may omit id and ts: any other type without them is a poison frame', () => {
    expect(readFrame(text({ ...base, id: null })).kind).toBe('poison');
    expect(readFrame(text({ ...base, ts: null })).kind).toBe('poison');
    expect(readFrame(text({ ...base, type: 'ack', seq: null, payload: {}, id: null, ts: null })).kind).toBe('poison');
    expect(readFrame(text({ ...base, type: 'ping', seq: null, payload: {}, id: 'not-a-ulid', ts: null })).kind).toBe('poison');
    expect(readFrame(text({ ...base, type: 'pong', seq: null, payload: {}, id: null, ts: 'yesterday' })).kind).toBe('poison');
  });
});

describe('__proto__ keys in a payload', () => {
  const base = {
    v: 1,
    type: 'node.observed',
    id: '01J9X2E5G7QK8V3B0YHN4TZC00',
    seq: 1,
    ack: null,
    reply_to: null,
    ts: '2026-08-19T14:02:11.482Z',
    payload: { node_id: 'n', name: 'n', ready: true, schedulable: true, labels: { a: 'b' }, taints: [], allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 } },
  };
  const text = JSON.stringify(base);

  it('make a poison frame (a schema would drop the key in silence), named by path', () => {
    const r = readFrame(text.replace('"a":"b"', '"__proto__":"b"'));
    expect(r).toMatchObject({ kind: 'poison', reason: 'payload key payload.labels.__proto__ is not allowed' });
  });

  it('are found when written with escapes too', () => {
    expect(readFrame(text.replace('"a":"b"', '"\\u005f_proto__":"b"')).kind).toBe('poison');
  });

  it('leave an ordinary frame alone', () => {
    expect(readFrame(text).kind).toBe('message');
  });

  it('are reported at the first one depth first, keys in order', () => {
    const t = text.replace('"labels":{"a":"b"},"taints":[]', '"taints":[{"key":"k","value":"v","effect":"NoSchedule","x":{"__proto__":1}}],"labels":{"__proto__":"b"}');
    expect(readFrame(t)).toMatchObject({ kind: 'poison', reason: 'payload key payload.taints.0.x.__proto__ is not allowed' });
  });

  // Unknown fields are ignored on receipt (the spec), whatever they hold: the key would vanish
  // with the field it is in, which is what ignoring it means.
  it('in an unknown field, or as one, are ignored', () => {
    expect(readFrame(text.replace('"taints":[]', '"taints":[],"zz":{"a":{"__proto__":1}}')).kind).toBe('message');
    expect(readFrame(text.replace('"taints":[]', '"taints":[],"__proto__":{"x":1}')).kind).toBe('message');
    expect(readFrame(text.replace('"taints":[]', '"taints":[],"\\u005f_proto__":1')).kind).toBe('message');
  });

  // A future field may nest as deep as the frame's size allows; a frame that threw here would
  // leave its seq uncounted (the next frame a gap, the session wedged).
  const deep = (depth: number, leaf: string) => `${'['.repeat(depth)}${leaf}${']'.repeat(depth)}`;
  it('are looked for without recursion: an unknown field nested 100,000 deep is ignored', () => {
    const t = text.replace('"taints":[]', `"taints":[],"zz_future":${deep(100_000, '{"__proto__":"\\u006e"}')}`);
    expect(readFrame(t).kind).toBe('message');
  });

  it('are found at the bottom of a deep value inside a field the schema reads', () => {
    const t = text.replace('"taints":[]', `"taints":[{"key":"k","value":"v","effect":"NoSchedule","zz":${deep(100_000, '{"__proto__":1}')}}]`);
    const r = readFrame(t);
    expect(r.kind).toBe('poison');
    expect((r as { reason: string }).reason).toMatch(/^payload key payload\.taints\.0\.zz\.0\.0\..*\.0\.__proto__ is not allowed$/);
  });
});

describe('payload timestamps name a time', () => {
  it.each([
    ['node.event', { subject: 'n', reason: 'r', message: 'm', severity: 'info', occurred_at: '2026-08-19T25:00:00Z' }],
    ['operation.start', { operation_id: '01J9X2E5G7QK8V3B0YHN4TZC00', kind: 'node.drain', target: 'n', params: {}, deadline: '2026-08-19T25:00:00Z' }],
  ])('%s with an hour 25 is a poison frame, not a NaN carried on', (type, payload) => {
    const text = JSON.stringify({ v: 1, type, id: '01J9X2E5G7QK8V3B0YHN4TZC01', seq: 1, ack: null, reply_to: null, ts: '2026-08-19T14:02:11.482Z', payload });
    expect(readFrame(text)).toMatchObject({ kind: 'poison' });
    expect(readFrame(text.replace('T25:00', 'T23:00')).kind).toBe('message');
  });
});

describe('frame ids', () => {
  it('ids at distinct times have random parts drawn afresh: 2,000 ids (many pools of random bytes) share none, and every position uses all 32 symbols', async () => {
    // A fresh factory: the one this file has warmed up increments within the last time it saw.
    vi.resetModules();
    const fresh = await import('../../../src/protocol/frames');
    const t0 = Date.UTC(2026, 11, 5);
    const randoms = Array.from({ length: 2_000 }, (_, i) => fresh.newId(t0 + i).slice(10));
    expect(new Set(randoms).size).toBe(randoms.length);
    for (let pos = 0; pos < 16; pos++) expect(new Set(randoms.map((r) => r[pos])).size).toBe(32);
  });

  it('ids within one millisecond stay monotonic', async () => {
    vi.resetModules();
    const fresh = await import('../../../src/protocol/frames');
    const t = Date.UTC(2026, 11, 5, 1);
    const ids = Array.from({ length: 300 }, () => fresh.newId(t));
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('a ULID is 128 bits: its first character is 0 to 7', () => {
  // 26 Crockford characters hold 130 bits; the ULID spec rejects anything above 7ZZZ…Z as overflow.
  const overflow = `8${'0'.repeat(25)}`;
  const largest = `7${'Z'.repeat(25)}`;

  it('an id above 7ZZZZZZZZZZZZZZZZZZZZZZZZZ is not a ULID', () => {
    expect(ULID_RE.test(overflow)).toBe(false);
    expect(ULID_RE.test('Z'.repeat(26))).toBe(false);
    expect(ULID_RE.test(largest)).toBe(true);
    expect(ULID_RE.test(newId())).toBe(true);
  });

  it('a frame whose id or reply_to overflows is a poison frame', () => {
    expect(readFrame(JSON.stringify({ ...base, id: overflow })).kind).toBe('poison');
    expect(readFrame(JSON.stringify({ ...base, reply_to: 'Z'.repeat(26) })).kind).toBe('poison');
    expect(readFrame(JSON.stringify({ ...base, id: largest })).kind).toBe('message');
  });

  it('an overflowing id is never echoed back as a reply_to', () => {
    expect(answerableId(overflow)).toBeNull();
    const fatal = decodeEnvelope(JSON.stringify({ ...base, v: 9, id: overflow }));
    expect(fatal).toMatchObject({ ok: false, id: null });
  });
});

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

  it('every toISOString time from year 1 to 9999 still names a time; year 0000 does not (the database refuses it)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -62135596800000, max: 253402300799999 }), (ms) => namesTime(new Date(ms).toISOString())),
      { numRuns: 2000 },
    );
    expect(namesTime('0000-06-01T00:00:00Z')).toBe(false);
  });

  it('a leap second (second 60) names a time: as an event occurred_at (zod and the fast validator alike) and as an envelope ts (Date.parse reads no second 60; before, both were refused)', () => {
    for (const s of ['2016-12-31T23:59:60Z', '2016-12-31T15:59:60-08:00', '2016-12-31T23:59:60.5Z']) {
      expect(namesTime(s), s).toBe(true);
      expect(decodeEnvelope(JSON.stringify({ ...base, ts: s })).ok, s).toBe(true);
      expect(frame(s).kind, s).toBe('message');
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(true);
      expect(decodePayload('node.event', event(s)).ok, s).toBe(true);
    }
    expect(namesTime('2016-12-31T23:59:61Z')).toBe(false);
  });

  it('T and Z may be lower case (RFC 3339 5.6), in an envelope ts and an event occurred_at alike (both were refused: found by a review)', () => {
    for (const s of ['2026-12-04t22:00:00Z', '2026-12-04T22:00:00z', '2026-12-04t22:00:00.5z', '2026-12-04t22:00:00+01:00', '2016-12-31t23:59:60z']) {
      expect(namesTime(s), s).toBe(true);
      expect(frame(s).kind, s).toBe('message');
      expect(decodePayload('node.event', event(s)).ok, s).toBe(true);
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(true);
    }
  });

  it('an occurred_at whose instant falls outside years 1 to 9999 in UTC is refused, as no UTC time can name it when it is read back (an envelope ts is not: it is never stored)', () => {
    for (const s of ['0001-01-01T00:30:00+01:00', '0001-01-01T10:00:00+16:00', '9999-12-31T23:30:00-01:00', '9999-12-31T23:59:60Z']) {
      expect(namesTime(s), s).toBe(false);
      expect(decodePayload('node.event', event(s)).ok, s).toBe(false);
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(false);
      expect(frame(s).kind, s).toBe('message');
    }
    for (const s of ['0001-01-01T00:00:00Z', '0001-01-01T00:30:00-01:00', '9999-12-31T23:59:59.999999Z', '9999-12-31T23:30:00+01:00']) {
      expect(namesTime(s), s).toBe(true);
    }
  });

  it('the digit reader for UTC times (the hot path) decides exactly as the pattern and Date.parse do, over near-miss strings of every part', () => {
    const two = (lo: number, hi: number) => fc.integer({ min: lo, max: hi }).map((v) => String(v).padStart(2, '0'));
    const pick = <T,>(...xs: T[]) => fc.constantFrom(...xs);
    const time = fc
      .record({
        year: fc.oneof(fc.integer({ min: 0, max: 9999 }), pick(0, 1, 1900, 2000, 2024, 2100, 9999)).map((v) => String(v).padStart(4, '0')),
        d1: pick('-', '-', '-', '/', ''),
        month: two(0, 19),
        day: two(0, 39),
        t: pick('T', 't', 'T', ' ', 'X'),
        hour: two(0, 29),
        c1: pick(':', ':', '.'),
        minute: two(0, 69),
        second: two(0, 69),
        frac: fc.oneof(pick(''), fc.stringMatching(/^\.[0-9]{1,11}$/), pick('.', '.5x', '.a')),
        zone: pick('Z', 'z', 'Z', '+01:00', '-08:00', '+16:00', '+99:99', 'ZZ', 'x', ''),
        mutate: fc.option(fc.tuple(fc.nat(40), fc.constantFrom('0', '9', 'a', '-', ':', 'Z', '\u0660', ' ')), { freq: 4 }),
      })
      .map((r) => {
        const text = `${r.year}${r.d1}${r.month}-${r.day}${r.t}${r.hour}${r.c1}${r.minute}:${r.second}${r.frac}${r.zone}`;
        if (!r.mutate) return text;
        const at = r.mutate[0] % (text.length + 1);
        return text.slice(0, at) + r.mutate[1] + text.slice(at + 1);
      });
    fc.assert(
      fc.property(time, fc.boolean(), (s, yearZero) => namesTime(s, yearZero) === namesTimeByParse(s, yearZero)),
      { numRuns: 50_000 },
    );
    fc.assert(
      fc.property(fc.integer({ min: -62167219200000, max: 253402300799999 }), fc.boolean(), (ms, yearZero) => {
        const s = new Date(ms).toISOString();
        return namesTime(s, yearZero) === namesTimeByParse(s, yearZero) && namesTime(s.replace(/\.\d+/, ''), yearZero) === namesTimeByParse(s.replace(/\.\d+/, ''), yearZero);
      }),
      { numRuns: 5_000 },
    );
  });

  it('a clock outside years 1 to 9999 writes the nearest time RFC 3339 can name, not toISOString\'s +010000 (every frame, the hello first, was refused: found by a review)', () => {
    expect(timestamp(Date.UTC(10000, 0, 1))).toBe('9999-12-31T23:59:59.999Z');
    expect(timestamp(-62135596800000 - 1)).toBe('0001-01-01T00:00:00.000Z');
    expect(timestamp(Date.UTC(2026, 11, 4, 23, 0, 0, 5))).toBe('2026-12-04T23:00:00.005Z');
    const f = readFrame(buildFrame({ type: 'node.removed', payload: { node_id: 'n1' }, seq: 1, now: Date.UTC(10000, 0, 1) }));
    expect(f.kind).toBe('message');
  });

  it('a clock before 1970 or past year 10889 (what a ULID can hold) still writes frames with a ULID id: newId threw there, so the SDK client could not be constructed (its epoch is an id) and no frame, the hello first, could be built; one reading past 10889 broke every later id of the process', async () => {
    // A process that starts with such a clock: a fresh id factory, not the one this file has warmed up.
    vi.resetModules();
    const fresh = await import('../../../src/protocol/frames');
    const beforeEpoch = Date.UTC(1969, 6, 20);
    expect(fresh.newId(beforeEpoch)).toMatch(ULID_RE);
    expect(fresh.readFrame(fresh.buildFrame({ type: 'hello', payload: { cluster_id: 'c', operator_version: 'dev', session_id: null, resume_from: null, lossy: false }, now: beforeEpoch })).kind).toBe('message');
    const pastUlid = 2 ** 48;
    expect(fresh.readFrame(fresh.buildFrame({ type: 'node.removed', payload: { node_id: 'n1' }, seq: 1, now: pastUlid })).kind).toBe('message');
    // The clock put right: ids keep coming.
    expect(fresh.newId(Date.UTC(2026, 11, 5))).toMatch(ULID_RE);
  });

  it('an envelope ts in year 0000 is read (never stored, and RFC 3339 admits it); an event occurred_at there is not (Postgres cannot store it)', () => {
    expect(frame('0000-01-01T00:00:00Z').kind).toBe('message');
    expect(decodePayload('node.event', event('0000-01-01T00:00:00Z')).ok).toBe(false);
    expect(decodePayloadWithZod('node.event', event('0000-01-01T00:00:00Z')).ok).toBe(false);
  });

  it('an event occurred_at written in year 0000 whose offset puts its instant in year 1 UTC is accepted (the instant is what is stored); one whose instant stays in year 0 is not', () => {
    for (const s of ['0000-12-31T23:30:00-01:00', '0000-12-31T00:01:00.5-23:59', '0000-12-31T23:59:60-00:01']) {
      expect(namesTime(s), s).toBe(true);
      expect(decodePayload('node.event', event(s)).ok, s).toBe(true);
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(true);
    }
    for (const s of ['0000-12-31T22:59:59-01:00', '0000-12-31T00:00:00.5-23:59', '0000-12-31T23:30:00+01:00', '0001-01-01T00:30:00+01:00']) {
      expect(namesTime(s), s).toBe(false);
      expect(decodePayload('node.event', event(s)).ok, s).toBe(false);
      expect(decodePayloadWithZod('node.event', event(s)).ok, s).toBe(false);
    }
  });
});
