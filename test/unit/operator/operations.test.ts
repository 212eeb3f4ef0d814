import { describe, expect, it } from 'vitest';
import type { OperationRecord } from '../../../src/operator/cursor-store';
import type { OperationContext } from '../../../src/operator/handlers';
import { memoryLogger } from '../../../src/operator/logger';
import { OperationBook } from '../../../src/operator/operations';
import type { OutItem } from '../../../src/operator/outgoing';
import { newId, type Payload } from '../../../src/protocol';
import { ManualTimers } from './support/manual-timers';

function setup(
  initial: OperationRecord[] = [],
  handler?: (p: Payload<'operation.start'>, ctx: OperationContext) => Promise<{ outcome: 'succeeded' | 'failed' | 'cancelled'; message?: string }>,
  persist: () => Promise<void> = async () => {},
) {
  const timers = new ManualTimers();
  const sent: OutItem[] = [];
  let changes = 0;
  const runs: Payload<'operation.start'>[] = [];
  const book = new OperationBook(
    initial,
    { send: (i) => sent.push(i), hasRoom: () => true, progressDropped: () => {}, changed: () => changes++, persist, sessionId: () => 'S1', timers, logger: memoryLogger() },
    {
      operation:
        handler ??
        (async (p) => {
          runs.push(p);
          return { outcome: 'succeeded', message: 'ok' };
        }),
    },
  );
  return { book, sent, timers, runs, changes: () => changes };
}

const ctx = (frameId = newId(), seq = 1) => ({ frameId, seq, resyncId: null, attempt: 0 });
const start = (timers: ManualTimers, id = newId()): Payload<'operation.start'> => ({
  operation_id: id,
  kind: 'node.cordon',
  target: 'node-a',
  params: {},
  deadline: new Date(timers.now() + 60_000).toISOString(),
});
const flush = () => new Promise((r) => setTimeout(r, 0));

describe('operation book', () => {
  it('accepts an operation once: dedupe by operation_id, whatever frame carries it', async () => {
    const { book, sent, timers, runs } = setup();
    const p = start(timers);
    expect(await book.start(p, ctx())).toEqual({ settle: 'applied' });
    expect(await book.start(p, ctx())).toEqual({ settle: 'applied' });
    await flush();
    expect(runs).toHaveLength(1);
    expect(sent.map((s) => s.type)).toEqual(['operation.accepted', 'operation.result']);
  });

  it('records before acking: the record exists (and is marked changed) when start() returns', async () => {
    const { book, timers, changes } = setup([], () => new Promise(() => {}));
    const p = start(timers);
    await book.start(p, ctx());
    expect(book.get(p.operation_id)?.state).toBe('running');
    expect(changes()).toBeGreaterThan(0);
  });

  it('the record is saved before the handler runs or the acceptance is queued; a save that fails withholds the ack', async () => {
    const order: string[] = [];
    let fail = false;
    const { book, sent, timers } = setup(
      [],
      async () => {
        order.push('handler');
        return { outcome: 'succeeded' };
      },
      async () => {
        order.push(`saved (${book.get(p.operation_id)?.state ?? 'absent'})`);
        if (fail) throw new Error('disk full');
      },
    );
    const p = start(timers);
    expect(await book.start(p, ctx())).toEqual({ settle: 'applied' });
    await flush();
    expect(order).toEqual(['saved (running)', 'handler']);
    expect(sent.map((s) => s.type)).toEqual(['operation.accepted', 'operation.result']);

    fail = true;
    const q = start(timers);
    expect(await book.start(q, ctx())).toEqual({ settle: 'failed', reason: 'the operation could not be recorded durably' });
    await flush();
    expect(book.get(q.operation_id)).toBeUndefined();
    expect(order.filter((o) => o === 'handler')).toHaveLength(1);
  });

  it('a redelivery of a start whose record is still being saved settles with that save: failed when it fails, never acked before it', async () => {
    // The hub's replay after a resume: the first copy's settlement went with its link, and its
    // record exists in memory only until the save completes.
    const saves: { resolve: () => void; reject: (e: Error) => void }[] = [];
    const { book, sent, timers, runs } = setup([], undefined, () => new Promise<void>((resolve, reject) => void saves.push({ resolve, reject })));
    const p = start(timers);
    const frameId = newId();
    const first = await book.accept(p, ctx(frameId, 5));
    const again = await book.accept(p, ctx(frameId, 5));
    expect([first.settle, again.settle]).toEqual(['recorded', 'recorded']);
    saves[0]!.reject(new Error('disk full'));
    const settled = await Promise.all([first, again].map((r) => (r.settle === 'recorded' ? r.durable : r)));
    expect(settled).toEqual([
      { settle: 'failed', reason: 'the operation could not be recorded durably' },
      { settle: 'failed', reason: 'the operation could not be recorded durably' },
    ]);
    expect(book.get(p.operation_id)).toBeUndefined();

    // Retried: this time the save holds, and a redelivery meanwhile settles applied once it has.
    const retry = await book.accept(p, ctx(frameId, 5));
    const redelivered = await book.accept(p, ctx(frameId, 5));
    saves[1]!.resolve();
    const both = await Promise.all([retry, redelivered].map((r) => (r.settle === 'recorded' ? r.durable : r)));
    expect(both).toEqual([{ settle: 'applied' }, { settle: 'applied' }]);
    await flush();
    expect(runs).toHaveLength(1);
    expect(sent.map((s) => s.type)).toEqual(['operation.accepted', 'operation.result']);
    // Saved: a later redelivery is dropped at once, as before.
    expect(await book.accept(p, ctx(frameId, 5))).toEqual({ settle: 'applied' });
  });

  it('a conclusion counts as delivered only once the frame carrying it is acknowledged', async () => {
    const { book, sent, timers } = setup();
    const p = start(timers);
    await book.start(p, ctx());
    await flush();
    const result = sent.find((s) => s.type === 'operation.result')!;
    result.onWritten?.(7);
    book.acknowledged(6);
    expect(book.get(p.operation_id)?.delivered).toBe(false);
    book.freshSession(); // dropped with the replay buffer: goes again
    expect(sent.filter((s) => s.type === 'operation.result')).toHaveLength(2);
    sent.at(-1)!.onWritten?.(3);
    book.acknowledged(3);
    expect(book.get(p.operation_id)?.delivered).toBe(true);
    book.freshSession();
    expect(sent.filter((s) => s.type === 'operation.result')).toHaveLength(2);
  });

  it('after a restart, concludes interrupted operations as failed and re-sends undelivered conclusions', () => {
    const timers = new ManualTimers();
    const base = { kind: 'node.drain' as const, deadline: timers.now() + 1e6, acceptedAt: timers.now(), concludedAt: null, delivered: false };
    const { book, sent } = setup([
      { ...base, operationId: 'A', startId: 'sa', state: 'running', conclusion: null },
      { ...base, operationId: 'B', startId: 'sb', state: 'concluded', conclusion: { frame: 'result', outcome: 'succeeded', message: '' }, concludedAt: 1 },
      { ...base, operationId: 'C', startId: 'sc', state: 'concluded', conclusion: { frame: 'result', outcome: 'succeeded', message: '' }, concludedAt: 1, delivered: true },
    ]);
    book.recover();
    expect(sent.map((s) => [s.type, s.replyTo, (s.payload as { outcome?: string }).outcome])).toEqual([
      ['operation.result', 'sa', 'failed'],
      ['operation.result', 'sb', 'succeeded'],
    ]);
  });

  it('answers deadline when it has passed, without running the operation', async () => {
    const { book, sent, timers, runs } = setup();
    const p = { ...start(timers), deadline: new Date(timers.now()).toISOString() };
    await book.start(p, ctx('01J9X2E5G7QK8V3B0YHN4TZC6M'));
    expect(runs).toHaveLength(0);
    expect(sent[0]).toMatchObject({ type: 'error', replyTo: '01J9X2E5G7QK8V3B0YHN4TZC6M', payload: { code: 'deadline', retryable: false } });
  });

  it('a handler that throws concludes the operation as failed', async () => {
    const { book, sent, timers } = setup([], async () => {
      throw new Error('kubectl exploded');
    });
    await book.start(start(timers), ctx());
    await flush();
    expect(sent.at(-1)).toMatchObject({ type: 'operation.result', payload: { outcome: 'failed', message: expect.stringContaining('kubectl exploded') } });
  });

  it('forgets delivered conclusions past the retention period', async () => {
    const { book, sent, timers } = setup();
    const p = start(timers);
    await book.start(p, ctx());
    await flush();
    timers.advance(8 * 24 * 3600_000);
    sent.at(-1)!.onWritten?.(1);
    book.acknowledged(1);
    expect(book.get(p.operation_id)).toBeUndefined();
  });
});

describe('operation text as the protocol counts it', () => {
  // Schema: message ≤ 2048 characters, phase 1–64, counted in code points. A cut by UTF-16 units
  // kept the high half of an emoji that straddled it: a lone surrogate, which Postgres refuses.
  const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

  it("a handler's long error message with an emoji at the cut is sent whole-charactered and within 2048 code points", async () => {
    // One of two lengths a unit apart puts the cut inside a pair, whatever the SDK's prefix.
    for (const pad of [2000, 2001]) {
      const text = 'x'.repeat(pad) + '\u{1F525}'.repeat(100);
      const { book, sent, timers } = setup([], async () => {
        throw new Error(text);
      });
      await book.start(start(timers), ctx());
      await flush();
      const result = sent.find((s) => s.type === 'operation.result');
      const message = (result?.payload as Payload<'operation.result'>).message;
      expect(lone.test(message), `pad ${pad}`).toBe(false);
      expect(Array.from(message).length).toBeLessThanOrEqual(2048);
      expect(message.endsWith('…')).toBe(true);
    }
  });

  it('a message of 2048 emoji (4096 UTF-16 units, 2048 characters) is sent uncut', async () => {
    const text = '\u{1F525}'.repeat(2048);
    const { book, sent, timers } = setup([], async () => ({ outcome: 'succeeded', message: text }));
    await book.start(start(timers), ctx());
    await flush();
    const result = sent.find((s) => s.type === 'operation.result');
    expect((result?.payload as Payload<'operation.result'>).message).toBe(text);
  });
});
