/**
 * The ingest schedule under random transient failures (row locks that come and go, outages of
 * the whole database) and frames arriving meanwhile. Invariants: every frame is applied exactly
 * once; never before an earlier frame about the same subject; a resync boundary applies after
 * everything before it and before everything after it; once the failures stop, everything drains.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildFrame, newId, readFrame, type MessageType, type Payload } from '../../src/protocol';
import type { InboundItem } from '../../src/hub/session/ingest-batch';
import { IngestSchedule, isBarrier, subjectOf } from '../../src/hub/session/ingest-schedule';

type Spec = { kind: 'node'; id: string } | { kind: 'event' } | { kind: 'begin' } | { kind: 'end' };

function frame<T extends MessageType>(seq: number, type: T, payload: Payload<T>): InboundItem {
  const id = newId();
  const f = readFrame(buildFrame({ type, payload, seq, id }));
  if (f.kind !== 'message') throw new Error(f.kind);
  // Sizes that vary, so a byte bound cuts statements at other places than the frame bound does.
  return { seq, id, replyTo: null, type, arrivedAt: seq, kind: 'message', message: f.message, bytes: ((seq * 37) % 5 + 1) * 100 };
}

function toItem(seq: number, s: Spec): InboundItem {
  switch (s.kind) {
    case 'node':
      return frame(seq, 'node.observed', {
        node_id: s.id,
        name: s.id,
        ready: true,
        schedulable: true,
        labels: {},
        taints: [],
        allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 },
      });
    case 'event':
      return frame(seq, 'node.event', { subject: 'x', reason: 'r', message: 'm', severity: 'info', occurred_at: new Date(0).toISOString() });
    case 'begin':
      return frame(seq, 'resync.begin', { scope: ['node'] });
    case 'end':
      return frame(seq, 'stream.end', { complete: true, count: 0 });
  }
}

const specArb: fc.Arbitrary<Spec> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('A', 'B', 'C', 'D').map((id): Spec => ({ kind: 'node', id })) },
  { weight: 2, arbitrary: fc.constant<Spec>({ kind: 'event' }) },
  { weight: 1, arbitrary: fc.constantFrom<Spec>({ kind: 'begin' }, { kind: 'end' }) },
);

const gapArb = fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 30 }) });

/** A lock on one subject, or an outage of everything, over [from, to). */
const faultArb = fc.record({
  subject: fc.option(fc.constantFrom('node:A', 'node:B', 'node:C', 'node:D'), { nil: null }),
  from: fc.integer({ min: 0, max: 400 }),
  length: fc.integer({ min: 1, max: 300 }),
});

type Arrival = { item: InboundItem; gap: number };

type Mode = 'one at a time' | 'two in flight, settled as a pair' | 'two in flight, sliding';

/**
 * Drive the schedule as the pipeline does, against the faults. With two in flight, a second
 * statement is sent behind the first whenever the schedule offers one (`behind`); outcomes are
 * read in the order statements were sent, the second's fault judged on its own frames. Sliding
 * (what the pipeline does): when the one ahead commits, the one behind is promoted and runs on
 * while frames arrive, another may go behind it, and its outcome is judged a step later.
 */
function simulate(arrivals: Arrival[], faults: { subject: string | null; from: number; length: number }[], maxBatch: number, mode: Mode, maxBytes = 1 << 30) {
  const schedule = new IngestSchedule({ maxBatch, maxBytes, maxHeld: 3, baseDelayMs: 5, maxDelayMs: 40 });
  const withinBytes = (run: readonly InboundItem[]) => run.length === 1 || run.reduce((n, x) => n + (x.bytes ?? 0), 0) <= maxBytes;
  const applied: number[] = [];
  let behindRuns = 0;
  let promotions = 0;
  let t = 0;
  let next = 0;
  let arriveAt = 0;
  let ahead: InboundItem[] | null = null;
  const verdict = (run: readonly InboundItem[]): 'global' | 'isolatable' | null => {
    const active = faults.filter((f) => f.from <= t && t < f.from + f.length);
    if (active.some((f) => f.subject === null)) return 'global';
    return active.some((f) => f.subject !== null && run.some((x) => subjectOf(x) === f.subject)) ? 'isolatable' : null;
  };
  for (let steps = 0; steps < 100_000; steps++) {
    while (next < arrivals.length && arriveAt <= t) {
      schedule.push((arrivals[next] as Arrival).item);
      arriveAt += (arrivals[next] as Arrival).gap;
      next++;
    }
    if (!ahead) {
      const plan = schedule.next(t);
      if ('idle' in plan) {
        if (next >= arrivals.length) break;
        t = Math.max(t + 1, arriveAt);
        continue;
      }
      if ('waitUntil' in plan) {
        expect(plan.waitUntil).toBeGreaterThan(t);
        t = next < arrivals.length ? Math.min(plan.waitUntil, Math.max(arriveAt, t + 1)) : plan.waitUntil;
        continue;
      }
      ahead = plan.run;
      expect(withinBytes(ahead), 'a statement within its byte bound').toBe(true);
    }
    const behind = mode !== 'one at a time' ? schedule.behind(t) : null;
    if (behind) behindRuns++;
    if (behind) expect(withinBytes(behind), 'a statement behind within its byte bound').toBe(true);
    const first = verdict(ahead);
    if (first) schedule.failed(first, t);
    else applied.push(...schedule.succeeded().map((x) => x.seq));
    ahead = null;
    if (behind && first === null && mode === 'two in flight, sliding') {
      schedule.promoteBehind();
      promotions++;
      ahead = behind;
      t += 1;
      continue;
    }
    if (behind) {
      const second = verdict(behind);
      if (second) schedule.behindFailed(second, t, first === null);
      else applied.push(...schedule.behindSucceeded().map((x) => x.seq));
    }
    t += 1;
  }
  return { schedule, applied, behindRuns, promotions };
}

function expectOrdered(arrivals: Arrival[], applied: number[]): void {
  const pos = new Map(applied.map((seq, i) => [seq, i]));
  const items = arrivals.map((a) => a.item);
  for (const a of items) {
    for (const b of items) {
      if (a.seq >= b.seq) continue;
      const ordered = (pos.get(a.seq) as number) < (pos.get(b.seq) as number);
      const same = subjectOf(a) !== null && subjectOf(a) === subjectOf(b);
      // Same subject, or a boundary on either side: the earlier frame applies first (a
      // statement's frames are listed in seq order, as the batch builder reads them).
      if (same || isBarrier(a) || isBarrier(b)) expect(ordered, `seq ${a.seq} before ${b.seq}`).toBe(true);
    }
  }
}

describe('ingest schedule (spec: reading does not stop at a hole)', () => {
  for (const mode of ['one at a time', 'two in flight, settled as a pair', 'two in flight, sliding'] as const) {
    it(`applies every frame once, in subject order and barrier order, and drains once failures stop (${mode})`, () => {
      let behindRuns = 0;
      let promotions = 0;
      fc.assert(
        fc.property(
          // Bursts (many frames at once) as well as trickles: a statement goes behind another only with a backlog.
          fc.array(fc.tuple(specArb, gapArb), { minLength: 1, maxLength: 120 }),
          fc.array(faultArb, { maxLength: 6 }),
          fc.integer({ min: 1, max: 16 }),
          fc.integer({ min: 100, max: 4_000 }),
          (specs, faults, maxBatch, maxBytes) => {
            const arrivals = specs.map(([s, gap], i) => ({ item: toItem(i + 1, s), gap }));
            const out = simulate(arrivals, faults, maxBatch, mode, maxBytes);
            behindRuns += out.behindRuns;
            promotions += out.promotions;
            // Drained: everything applied exactly once.
            expect(out.schedule.size).toBe(0);
            expect(out.schedule.bytes).toBe(0);
            expect([...out.applied].sort((a, b) => a - b)).toEqual(arrivals.map((a) => a.item.seq));
            expectOrdered(arrivals, out.applied);
          },
        ),
        { numRuns: 300 },
      );
      // The pipelined runs did send statements behind others (the property is not vacuous).
      if (mode === 'one at a time') expect(behindRuns).toBe(0);
      else expect(behindRuns).toBeGreaterThan(50);
      if (mode === 'two in flight, sliding') expect(promotions).toBeGreaterThan(50);
      else expect(promotions).toBe(0);
    });
  }

  it('sends nothing behind a statement that carries a resync boundary, or while a subject is held, and never a subject the one ahead carries', () => {
    const schedule = new IngestSchedule({ maxBatch: 2, maxBytes: 1 << 30, maxHeld: 3, baseDelayMs: 5, maxDelayMs: 40 });
    const specs: Spec[] = [
      { kind: 'node', id: 'A' },
      { kind: 'node', id: 'B' },
      { kind: 'node', id: 'A' },
      { kind: 'node', id: 'C' },
      { kind: 'event' },
      { kind: 'begin' },
      { kind: 'node', id: 'D' },
    ];
    specs.forEach((s, i) => schedule.push(toItem(i + 1, s)));
    let plan = schedule.next(0);
    expect('run' in plan && plan.run.map((x) => x.seq)).toEqual([1, 2]);
    // Behind A and B: the second A is skipped (and waits), C and the event go.
    expect(schedule.behind(0)?.map((x) => x.seq)).toEqual([4, 5]);
    schedule.succeeded();
    schedule.behindSucceeded();
    plan = schedule.next(1);
    expect('run' in plan && plan.run.map((x) => x.seq)).toEqual([3, 6]);
    // The boundary is in the statement ahead: nothing goes behind it.
    expect(schedule.behind(1)).toBeNull();
    schedule.failed('isolatable', 1);
    plan = schedule.next(2);
    expect('run' in plan && plan.run.map((x) => x.seq)).toEqual([3]);
    schedule.failed('isolatable', 2);
    // A is held now: no statement goes behind anything until it is released.
    plan = schedule.next(100);
    expect('run' in plan && plan.run.map((x) => x.seq)).toEqual([3]);
    expect(schedule.behind(100)).toBeNull();
  });

  it('while one subject stays locked, every other frame before the next boundary is applied and the locked ones wait in order', () => {
    const schedule = new IngestSchedule({ maxBatch: 16, maxBytes: 1 << 30, maxHeld: 3, baseDelayMs: 5, maxDelayMs: 40 });
    const specs: Spec[] = [
      { kind: 'node', id: 'A' },
      { kind: 'node', id: 'B' },
      { kind: 'event' },
      { kind: 'node', id: 'A' },
      { kind: 'node', id: 'C' },
      { kind: 'begin' },
      { kind: 'node', id: 'D' },
    ];
    specs.forEach((s, i) => schedule.push(toItem(i + 1, s)));
    const applied: number[] = [];
    for (let t = 0; t < 500; t++) {
      const plan = schedule.next(t);
      if (!('run' in plan)) continue;
      if (plan.run.some((x) => subjectOf(x) === 'node:A')) schedule.failed('isolatable', t);
      else applied.push(...schedule.succeeded().map((x) => x.seq));
    }
    // B, the event and C applied; the boundary (and D behind it) waits for A.
    expect(applied).toEqual([2, 3, 5]);
    expect(schedule.heldSubjects).toBe(1);
    expect(schedule.oldestArrival()).toBe(1);
  });
});

describe('ingest schedule: operation frames and answered errors keep their order', () => {
  it('an error answering a frame and any operation frame share one ordering subject', () => {
    const base = { seq: 1, id: '01J9X2E5G7QK8V3B0YHN4TZC00', arrivedAt: 0, kind: 'message' as const };
    const error = { ...base, type: 'error', replyTo: '01J9X2E5G7QK8V3B0YHN4TZC01', message: { type: 'error', payload: { code: 'deadline', message: 'm', retryable: false } } } as InboundItem;
    const result = { ...base, seq: 2, type: 'operation.result', replyTo: null, message: { type: 'operation.result', payload: { operation_id: 'op-1', outcome: 'succeeded', message: '' } } } as InboundItem;
    const other = { ...result, seq: 3, message: { type: 'operation.accepted', payload: { operation_id: 'op-2' } } } as InboundItem;
    expect(subjectOf(error)).not.toBeNull();
    expect(subjectOf(error)).toBe(subjectOf(result));
    expect(subjectOf(other)).toBe(subjectOf(result));
    expect(subjectOf({ ...error, replyTo: null } as InboundItem)).toBeNull();
  });
});
