/**
 * The admin API refuses desired state whose frame would be larger than a frame may be, by a
 * count of the JSON it would become (frame-size.ts) instead of serializing it: the count must be
 * exactly what JSON.stringify writes, and the frame bound must hold for any revision, seq, ack
 * and reply_to the frame is later written with.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildFrame, desiredFrameBytes, jsonUtf8Length, MAX_REPLICAS, newId, operationStartFrameBytes, utf8Length } from '../../../src/protocol';

const anyString = fc.string({ unit: 'binary' });
const escapes = fc.string({ unit: fc.constantFrom('"', '\\', '\n', '\u0001', '\u001f', '\u2028', 'é', '€', '😀', '\ud800', '\udc00', 'a') });
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    anyString,
    escapes,
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.dictionary(fc.oneof(anyString, escapes), tie('value'), { maxKeys: 5 }),
  ),
})).value;

describe('jsonUtf8Length', () => {
  it('is the UTF-8 size of JSON.stringify for any JSON value (escapes, astral and lone surrogates, numbers)', () => {
    fc.assert(
      fc.property(json, (v) => {
        expect(jsonUtf8Length(v)).toBe(utf8Length(JSON.stringify(v)));
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('desiredFrameBytes', () => {
  it('bounds the deployment.desired frame written with the longest ids, revision, seq, ack and reply_to', () => {
    const serving = { engine: 'vllm', model: 'm', image: 'i', args: ['"\\'], env: { A: '\u0001'.repeat(10) }, gpus_per_replica: 1, gpu_model: null, port: 8000 };
    const id = 'x'.repeat(253);
    const frame = buildFrame({
      type: 'deployment.desired',
      payload: { deployment_id: id, workload_id: id, revision: Number.MAX_SAFE_INTEGER, min_replicas: MAX_REPLICAS, max_replicas: MAX_REPLICAS, serving, deleted: false },
      seq: Number.MAX_SAFE_INTEGER,
      ack: Number.MAX_SAFE_INTEGER,
      reply_to: '01J0000000000000000000000Z',
    });
    expect(desiredFrameBytes(serving)).toBe(utf8Length(frame));
    const small = buildFrame({ type: 'deployment.desired', payload: { deployment_id: 'd', workload_id: 'w', revision: 1, min_replicas: 0, max_replicas: 1, serving, deleted: false }, seq: 1, ack: 0 });
    expect(desiredFrameBytes(serving)).toBeGreaterThan(utf8Length(small));
  });
});

describe('operationStartFrameBytes', () => {
  it('bounds the operation.start frame for any target and params, with any id, deadline, seq, ack and reply_to', () => {
    const scalar = fc.oneof(anyString, escapes, fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null));
    fc.assert(
      fc.property(
        fc.oneof(anyString, escapes),
        fc.dictionary(fc.oneof(anyString, escapes), scalar, { maxKeys: 6 }),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        fc.integer({ min: 0, max: 8.64e15 }),
        (target, params, seq, deadlineMs) => {
          const op = { kind: 'model.prefetch', target, params };
          const frame = buildFrame({
            type: 'operation.start',
            payload: { operation_id: newId(), ...op, deadline: new Date(deadlineMs).toISOString() } as never,
            seq,
            ack: seq - 1,
            reply_to: newId(),
          });
          expect(operationStartFrameBytes(op)).toBeGreaterThanOrEqual(utf8Length(frame));
        },
      ),
      { numRuns: 1_000 },
    );
  });
});
