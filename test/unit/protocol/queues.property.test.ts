/**
 * Property tests of the operator's send queue (spec, Backpressure), driven by random pushes of
 * state frames (few coalescing keys, so replacement happens), events and control frames, shifts
 * and supersessions, at capacities small enough to be full most of the time:
 *  - nothing is lost silently: every frame pushed is written, still queued, or counted (replaced,
 *    evicted, dropped event) or refused back to the caller;
 *  - control frames (resync framing, errors, operation reports) are never replaced or evicted,
 *    and are written in the order they were pushed;
 *  - a subject's frames are written oldest first, never an older after a newer, and the newest
 *    pushed for each subject is written unless it was reported lost or superseded by a snapshot;
 *  - the queue stays within capacity plus its control reserve;
 *  - state frames lost outright (no newer frame of their subject took their place) are reported.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OperatorSendQueue, type Queued } from '../../../src/protocol';

type Op = { t: 'state'; key: string } | { t: 'event' } | { t: 'control' } | { t: 'shift' } | { t: 'supersede'; key: string };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'b', 'c', 'd', 'e').map((key): Op => ({ t: 'state', key })) },
  { weight: 3, arbitrary: fc.constant<Op>({ t: 'event' }) },
  { weight: 1, arbitrary: fc.constant<Op>({ t: 'control' }) },
  { weight: 4, arbitrary: fc.constant<Op>({ t: 'shift' }) },
  { weight: 1, arbitrary: fc.constantFrom('a', 'b', 'c').map((key): Op => ({ t: 'supersede', key })) },
);

interface Frame {
  n: number;
  kind: 'state' | 'event' | 'control';
  key: string | null;
}

describe('the operator send queue under random load', () => {
  it('loses nothing silently, never drops or reorders control frames, never sends a subject older than its newest, and stays bounded', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 3 }), fc.array(opArb, { minLength: 1, maxLength: 300, size: 'max' }), (capacity, reserve, ops) => {
        const lost: Frame[] = [];
        const q = new OperatorSendQueue<Frame>(capacity, reserve, (item: Queued<Frame>) => lost.push(item.value));
        let n = 0;
        let pushed = 0;
        let refused = 0;
        let pushedEvents = 0;
        let writtenEvents = 0;
        const written: Frame[] = [];
        const controlPushed: number[] = [];
        /** The newest frame pushed per key, and the newest written per key. */
        const newest = new Map<string, number>();
        const lastWritten = new Map<string, number>();
        const superseded = new Set<number>();
        const write = (f: Frame) => {
          written.push(f);
          if (f.kind === 'event') writtenEvents++;
          if (f.key !== null) {
            expect(f.n, 'never an older frame of a subject after a newer one').toBeGreaterThan(lastWritten.get(f.key) ?? 0);
            lastWritten.set(f.key, f.n);
          }
        };
        for (const op of ops) {
          if (op.t === 'shift') {
            const f = q.shift();
            if (f) write(f);
            continue;
          }
          if (op.t === 'supersede') {
            for (const f of q.values()) if (f.key === op.key) superseded.add(f.n);
            q.supersede((_v, key) => key === op.key);
            continue;
          }
          const f: Frame = { n: ++n, kind: op.t, key: op.t === 'state' ? op.key : null };
          const outcome = q.push({ value: f, class: op.t, key: f.key });
          pushed++;
          if (op.t === 'event') pushedEvents++;
          if (outcome === 'rejected') {
            refused++;
            expect(op.t, 'only a control frame is refused back to its caller').toBe('control');
            continue;
          }
          if (op.t === 'control') controlPushed.push(f.n);
          if (f.key !== null) newest.set(f.key, f.n);
          expect(q.length).toBeLessThanOrEqual(capacity + reserve);
        }
        for (let f = q.shift(); f; f = q.shift()) write(f);
        const c = q.counters;
        // Conservation: written, replaced, evicted, dropped, or refused.
        expect(written.length + c.replacedFrames + c.evictedFrames + c.droppedEvents + refused).toBe(pushed);
        expect(writtenEvents + c.droppedEvents, 'every event is written or counted dropped').toBe(pushedEvents);
        expect(written.filter((f) => f.kind === 'control').map((f) => f.n), 'control frames: all written, in order').toEqual(controlPushed);
        // Evicted state frames are the ones reported lost.
        expect(lost.every((f) => f.kind === 'state')).toBe(true);
        expect(lost.length).toBeLessThanOrEqual(c.evictedFrames);
        const lostN = new Set(lost.map((f) => f.n));
        for (const [key, n] of newest) {
          expect(lastWritten.get(key) === n || lostN.has(n) || superseded.has(n), `the newest frame of ${key} (${n}) is written, or reported lost or superseded`).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
