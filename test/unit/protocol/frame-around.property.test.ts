/**
 * The hub writes a queued frame around the payload text it already serialized to measure the
 * frame (`buildFrameAround`); that text must be exactly what `buildFrame` writes, for any payload
 * of any type and any envelope fields, or replay and the operator would see two spellings.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildFrame, buildFrameAround, CATALOG, decodeEnvelope, MESSAGE_TYPES, newId, type MessageType, type Payload } from '../../../src/protocol';
import { arbitraryOf } from './support/schema-arbitraries';

const fields = fc.record({
  seq: fc.option(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), { nil: null }),
  ack: fc.option(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), { nil: null }),
  replyTo: fc.option(fc.constant(null).map(() => newId()), { nil: null }),
  withId: fc.boolean(),
  now: fc.integer({ min: 0, max: 253_402_300_799_999 }),
});

describe('buildFrameAround', () => {
  it('writes the text buildFrame writes, for every message type and generated payloads', () => {
    for (const type of MESSAGE_TYPES) {
      // Payloads from the type's schema where the generator can build them (it needs a field),
      // else any JSON object: the payload text is written verbatim either way.
      let schemaPayloads: fc.Arbitrary<unknown> | null = null;
      try {
        schemaPayloads = arbitraryOf(CATALOG[type].schema);
      } catch {
        schemaPayloads = null;
      }
      // (The generator also makes invalid values; a payload is always an object.)
      const objects = schemaPayloads?.filter((p) => p !== null && typeof p === 'object' && !Array.isArray(p));
      const payloads = objects ? fc.oneof(objects, fc.object()) : fc.object();
      fc.assert(
        fc.property(payloads, fields, (payload, f) => {
          const id = f.withId ? newId(f.now) : undefined;
          const common = { type, seq: f.seq, ack: f.ack, reply_to: f.replyTo, now: f.now, ...(id ? { id } : {}) };
          const around = buildFrameAround(common, JSON.stringify(payload));
          // Without an id both mint one: compare with the minted id put back.
          const minted = (JSON.parse(around) as { id: string }).id;
          const reference = buildFrame({ ...common, id: id ?? minted, payload: payload as Payload<MessageType> });
          expect(around).toBe(reference);
        }),
        { numRuns: 40 },
      );
    }
  });

  it('decodes to the fields it was given', () => {
    const id = newId();
    const text = buildFrameAround({ type: 'ack' as MessageType, seq: null, ack: 7, reply_to: null, id, now: 0 }, '{}');
    const d = decodeEnvelope(text);
    expect(d.ok && d.envelope).toMatchObject({ type: 'ack', id, seq: null, ack: 7, reply_to: null, ts: '1970-01-01T00:00:00.000Z', payload: {} });
  });
});
