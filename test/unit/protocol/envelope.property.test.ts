/**
 * decodeEnvelope checks every frame with hand-written code (`envelopeProblem`) instead of zod's
 * interpreted path; `EnvelopeSchema` stays the contract. Over envelopes generated from that schema,
 * the fast check refuses exactly what the schema refuses (naming a field the schema names), and
 * decodeEnvelope answers exactly what it answered when it ran the schema itself.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  decodeEnvelope,
  ENVELOPE_TEXT_MAX,
  ENVELOPE_VERSION,
  EnvelopeSchema,
  envelopeProblem,
  isSequencedType,
  MIN_ENVELOPE_VERSION,
  ULID_RE,
  type EnvelopeDecode,
} from '../../../src/protocol';
import { arbitraryOf, jsonObject } from './support/schema-arbitraries';

/** id, reply_to and ts as the envelope keeps them: absent stays absent, unusable text is ''. */
const asText = <T,>(v: unknown, absent: T): string | T =>
  v === null || v === undefined ? absent : z.string().max(ENVELOPE_TEXT_MAX).safeParse(v).data ?? '';

/** decodeEnvelope as it was with the schema doing the checking: the reference. */
function decodeWithZod(text: string): EnvelopeDecode {
  const fail = (reason: string, raw: unknown): EnvelopeDecode => {
    const candidate = raw && typeof raw === 'object' && !Array.isArray(raw) ? (raw as { id?: unknown }).id : undefined;
    return { ok: false, reason, id: typeof candidate === 'string' && ULID_RE.test(candidate) ? candidate : null };
  };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return fail('frame is not JSON', undefined);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return fail('frame is not a JSON object', undefined);
  const parsed = EnvelopeSchema.safeParse(raw, { jitless: true });
  if (!parsed.success) return fail(`envelope field ${parsed.error.issues[0]?.path.join('.')}`, raw);
  const e = parsed.data;
  if (e.v < MIN_ENVELOPE_VERSION || e.v > ENVELOPE_VERSION) return fail(`envelope version ${e.v} outside [${MIN_ENVELOPE_VERSION}, ${ENVELOPE_VERSION}]`, raw);
  let sequenced = isSequencedType(e.type);
  if (sequenced && (e.seq === null || e.seq === undefined)) {
    if (e.type !== 'error') return fail(`sequenced type ${e.type} without seq`, raw);
    sequenced = false;
  }
  const unusable = (['id', 'reply_to', 'ts'] as const).find((k) => e[k] !== null && e[k] !== undefined && asText(e[k], null) === '' && e[k] !== '');
  return {
    ok: true,
    envelope: {
      v: e.v,
      type: e.type,
      id: asText(e.id, ''),
      seq: sequenced ? (e.seq as number) : null,
      ack: e.ack ?? null,
      reply_to: asText(e.reply_to, null),
      ts: asText(e.ts, ''),
      payload: e.payload,
      ...(unusable ? { unusable } : {}),
    },
  };
}

/** Envelope-shaped objects: generated from the schema, with the values that steer decoding mixed in. */
const envelopes = fc
  .tuple(
    arbitraryOf(EnvelopeSchema),
    fc.option(fc.constantFrom<unknown>(1, 0, 2, -0, 1.0000000000000002), { freq: 2 }),
    fc.option(fc.constantFrom('ping', 'hello', 'error', 'ack', 'device.observed', 'stream.end', 'recipe.desired'), { freq: 2 }),
  )
  .map(([e, v, type]) => {
    if (e === null || typeof e !== 'object' || Array.isArray(e)) return e;
    const o = e as Record<string, unknown>;
    const entries = Object.keys(o).map((k): [string, unknown] => [k, o[k]]);
    if (v !== null) entries.push(['v', v]);
    if (type !== null) entries.push(['type', type]);
    const last = new Map(entries);
    return jsonObject([...last]);
  });

describe('envelope: the fast check and the schema agree', () => {
  it('envelopeProblem refuses exactly what EnvelopeSchema refuses, naming a field it names', () => {
    let accepted = 0;
    let refused = 0;
    fc.assert(
      fc.property(envelopes, (e) => {
        if (e === null || typeof e !== 'object' || Array.isArray(e)) return;
        const problem = envelopeProblem(e as Record<string, unknown>);
        for (const jitless of [true, false]) {
          const ref = EnvelopeSchema.safeParse(e, { jitless });
          expect(problem === null, `${JSON.stringify(e)?.slice(0, 400)}: fast ${problem}, zod ${ref.success ? 'ok' : JSON.stringify(ref.error.issues.map((i) => i.path))}`).toBe(ref.success);
          if (!ref.success && problem !== null) {
            expect(ref.error.issues.map((i) => i.path.join('.'))).toContain(problem.slice(0, problem.indexOf(':')));
          }
        }
        if (problem === null) accepted++;
        else refused++;
      }),
      { numRuns: 3000 },
    );
    expect(accepted).toBeGreaterThan(300);
    expect(refused).toBeGreaterThan(300);
  });

  it('decodeEnvelope answers as it did with the schema: same verdict, same envelope, the same field named', () => {
    fc.assert(
      fc.property(fc.oneof({ weight: 20, arbitrary: envelopes }, { weight: 1, arbitrary: fc.jsonValue() }), (e) => {
        const text = JSON.stringify(e) ?? 'undefined';
        const fast = decodeEnvelope(text);
        const ref = decodeWithZod(text);
        expect(fast.ok, text.slice(0, 400)).toBe(ref.ok);
        if (fast.ok && ref.ok) expect(fast.envelope).toStrictEqual(ref.envelope);
        if (!fast.ok && !ref.ok) {
          expect(fast.id).toBe(ref.id);
          // Same prefix and, for a field, the same field: the wording after it is the fast check's own.
          expect(fast.reason.split(':')[0]).toBe(ref.reason.split(':')[0]);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('boundary envelopes, one slot at a time', () => {
    const base = { v: 1, type: 'node.removed', id: '01J9X2E5G7QK8V3B0YHN4TZC6M', seq: 7, ack: 3, reply_to: null, ts: '2026-08-19T14:02:11.482Z', payload: { node_id: 'n1' } };
    const values: unknown[] = [undefined, null, 0, -0, 1, -1, 1.5, 2 ** 53 - 1, 2 ** 53, 1e21, '', 'x', 'a'.repeat(64), 'a'.repeat(65), '😀'.repeat(64), '😀'.repeat(65), 'a'.repeat(256), 'a'.repeat(257), '😀'.repeat(256), '😀'.repeat(257), [], {}, true];
    for (const key of Object.keys(base)) {
      for (const value of [...values, 'remove']) {
        const o = jsonObject(Object.entries(base).flatMap(([k, x]): [string, unknown][] => (k !== key ? [[k, x]] : value === 'remove' ? [] : [[k, value]])));
        const text = JSON.stringify(o);
        const fast = decodeEnvelope(text);
        const ref = decodeWithZod(text);
        expect(fast.ok, `${key} = ${String(value).slice(0, 20)}`).toBe(ref.ok);
        if (fast.ok && ref.ok) expect(fast.envelope).toStrictEqual(ref.envelope);
        if (!fast.ok && !ref.ok) expect(fast.reason.split(':')[0]).toBe(ref.reason.split(':')[0]);
        const problem = envelopeProblem(o);
        expect(problem === null, `${key} = ${String(value).slice(0, 20)} (raw)`).toBe(EnvelopeSchema.safeParse(o, { jitless: true }).success);
      }
    }
  });
});
