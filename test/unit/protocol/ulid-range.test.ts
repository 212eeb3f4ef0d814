import { describe, expect, it } from 'vitest';
import { answerableId, decodeEnvelope, newId, readFrame, ULID_RE } from '../../../src/protocol';

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
