/**
 * A frame the database refuses for good (a permanent failure) among the frames of a subject the
 * schedule holds aside (a row lock made it fail): the spec's poison frame, to be accepted and
 * dropped so the stream moves on. The held subject's retry failed whole, was halved through the
 * shared chunk limit, and every other statement that committed meanwhile doubled that limit
 * again: the retry took the same frames at every turn and failed, the poison frame was never
 * narrowed down, and the cursor stayed behind the held subject until the hole timeout closed the
 * link (found by review of the ingest path).
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, newId, readFrame } from '../../src/protocol';
import type { InboundItem } from '../../src/hub/session/ingest-batch';
import { IngestSchedule, subjectOf } from '../../src/hub/session/ingest-schedule';

function node(seq: number, id: string): InboundItem {
  const frameId = newId();
  const f = readFrame(
    buildFrame({
      type: 'node.observed',
      seq,
      id: frameId,
      payload: { node_id: id, name: id, ready: true, schedulable: true, labels: {}, taints: [], allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 } },
    }),
  );
  if (f.kind !== 'message') throw new Error(f.kind);
  return { seq, id: frameId, replyTo: null, type: 'node.observed', arrivedAt: seq, kind: 'message', message: f.message, bytes: 100 };
}

describe('ingest schedule: a poison frame among a held subject\'s frames', () => {
  it('is narrowed down and handed back for rejection while other subjects keep committing', () => {
    const s = new IngestSchedule({ maxBatch: 8, maxBytes: 1 << 30, maxHeld: 3, baseDelayMs: 5, maxDelayMs: 40 });
    let seq = 0;
    const push = (id: string) => {
      const item = node(++seq, id);
      s.push(item);
      return item;
    };
    const lockUntil = 30;
    push('A');
    push('A');
    const poison = push('A');
    const applied: number[] = [];
    let statements = 0;
    let rejectedAt: number | null = null;
    let atUnlock: number | null = null;
    let t = 0;
    for (let step = 0; step < 2_000 && rejectedAt === null; step++) {
      // Other subjects keep arriving, and keep committing.
      push(`B${step % 5}`);
      const plan = s.next(t);
      if ('idle' in plan) break;
      if ('waitUntil' in plan) {
        t = plan.waitUntil;
        continue;
      }
      statements++;
      if (t >= lockUntil) atUnlock ??= statements;
      const run = plan.run;
      if (t < lockUntil && run.some((x) => subjectOf(x) === 'node:A')) s.failed('isolatable', t);
      else if (run.some((x) => x.seq === poison.seq)) {
        const refused = s.failed('permanent', t);
        if (refused) {
          expect(refused.seq).toBe(poison.seq);
          rejectedAt = statements;
        }
      } else applied.push(...s.succeeded().map((x) => x.seq));
      t += 1;
    }
    // Found within a few statements of the lock's end (log2 of the held run, and the other
    // subjects' turns between the held retries), not never.
    expect(rejectedAt, 'the poison frame handed back for rejection').not.toBeNull();
    expect((rejectedAt as number) - (atUnlock as number)).toBeLessThanOrEqual(12);
    expect(applied).toEqual(expect.arrayContaining([1, 2]));
  });
});
