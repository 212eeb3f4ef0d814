/**
 * The ingest pipeline's scheduling, with a scripted statement in place of Postgres (what the
 * statement does is covered against a real database in test/hub/observed.test.ts and friends).
 */
import { describe, expect, it } from 'vitest';
import type { Sql } from '../../src/hub/db/sql';
import { createLogger, type Logger } from '../../src/hub/log';
import type { InboundItem } from '../../src/hub/session/ingest-batch';
import { IngestPipeline, type IngestHost } from '../../src/hub/session/ingest-pipeline';

const item = (seq: number): InboundItem => ({ kind: 'unknown', seq, id: `f${seq}`, replyTo: null, type: 'future.thing', arrivedAt: Date.now() });

/** Microtasks only: what runs in the same turn. */
async function sameTurn(): Promise<void> {
  for (let i = 0; i < 50; i++) await Promise.resolve();
}

/** The pipeline ends its turn after settling a commit (the ack leaves first): let it go on. */
async function settle(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    await sameTurn();
    await new Promise((r) => setTimeout(r, 0));
  }
}

function harness(onCommitted: (seqs: number[], pipeline: IngestPipeline) => void = () => {}) {
  const committed: number[][] = [];
  let statements = 0;
  const sql: Sql = {
    async query<R>() {
      statements++;
      return { rows: [{ fenced: true, pruned: 0 }] as R[], rowCount: 1 };
    },
  };
  const host: IngestHost = {
    sql,
    fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
    resyncs: () => ({}),
    sentDesired: () => null,
    committed: (items) => {
      const seqs = items.map((i) => i.seq);
      committed.push(seqs);
      onCommitted(seqs, pipeline);
    },
    fenceLost: () => {
      throw new Error('fence lost');
    },
    keepRetrying: () => true,
    log: createLogger({}, 'error'),
  };
  const pipeline = new IngestPipeline(host, 100);
  return { pipeline, committed, statements: () => statements };
}

describe('ingest pipeline scheduling', () => {
  it('frames that arrive in the same tick share one statement', async () => {
    const h = harness();
    for (let seq = 1; seq <= 5; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.committed).toEqual([[1, 2, 3, 4, 5]]);
    expect(h.statements()).toBe(1);
  });

  it('a frame pushed just as the last batch finishes is applied without waiting for another frame', async () => {
    // Pushed from a microtask queued during the commit: it runs after the loop has found nothing
    // left, and before a `.finally()` on the loop's promise would have marked it stopped.
    let pushedLate = false;
    const h = harness((seqs, pipeline) => {
      if (!pushedLate && seqs.includes(1)) {
        pushedLate = true;
        queueMicrotask(() => pipeline.push(item(2)));
      }
    });
    h.pipeline.push(item(1));
    await settle();
    expect(h.committed).toEqual([[1], [2]]);
    expect(h.pipeline.size).toBe(0);
  });
});

/** Statements that answer when the test says, in the order they were sent. */
function scripted(maxBatch: number, log: Logger = createLogger({}, 'error')) {
  const committed: number[][] = [];
  const pending: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  const sql: Sql = {
    query<R>() {
      return new Promise<{ rows: R[]; rowCount: number }>((resolve, reject) => {
        pending.push({ resolve: () => resolve({ rows: [{ fenced: true, pruned: 0 }] as R[], rowCount: 1 }), reject });
      });
    },
  };
  const host: IngestHost = {
    sql,
    fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
    resyncs: () => ({}),
    sentDesired: () => null,
    committed: (items) => committed.push(items.map((i) => i.seq)),
    fenceLost: () => {
      throw new Error('fence lost');
    },
    keepRetrying: () => true,
    log,
  };
  return { pipeline: new IngestPipeline(host, maxBatch), committed, pending };
}

describe('ingest pipeline: a second statement in flight', () => {
  it('is sent before the first is answered, and the two settle in the order they were sent', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 5; seq++) h.pipeline.push(item(seq));
    await settle();
    // Both out at once: the database runs the second straight after the first.
    expect(h.pending.length).toBe(2);
    expect(h.pipeline.statementsInFlight).toBe(2);
    h.pending[1]?.resolve();
    await settle();
    expect(h.committed).toEqual([]);
    expect(h.pipeline.statementsInFlight).toBe(1);
    h.pending[0]?.resolve();
    await settle();
    expect(h.committed).toEqual([
      [1, 2],
      [3, 4],
    ]);
    expect(h.pending.length).toBe(3);
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed.at(-1)).toEqual([5]);
    expect(h.pipeline.size).toBe(0);
    expect(h.pipeline.statementsInFlight).toBe(0);
  });

  it('slides: when the first commits while the second runs, a third goes out behind the second at once', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 7; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.pending.length).toBe(2);
    h.pending[0]?.resolve();
    await settle();
    // The database is never left without the next statement: [5, 6] is queued behind [3, 4].
    expect(h.committed).toEqual([[1, 2]]);
    expect(h.pending.length).toBe(3);
    expect(h.pipeline.statementsInFlight).toBe(2);
    h.pending[1]?.resolve();
    await settle();
    expect(h.committed).toEqual([
      [1, 2],
      [3, 4],
    ]);
    expect(h.pending.length).toBe(4);
    h.pending[2]?.resolve();
    await settle();
    h.pending[3]?.resolve();
    await settle();
    expect(h.committed).toEqual([[1, 2], [3, 4], [5, 6], [7]]);
    expect(h.pipeline.size).toBe(0);
    expect(h.pipeline.statementsInFlight).toBe(0);
  });

  it('builds the next statement only after the turn that settled a commit has ended, so the ack is not held behind the build', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 7; seq++) h.pipeline.push(item(seq));
    await settle();
    h.pending[0]?.resolve();
    await sameTurn();
    // Settled (cursor written, ack sent) in this turn; [5, 6] is not built in it.
    expect(h.committed).toEqual([[1, 2]]);
    expect(h.pending.length).toBe(2);
    await settle();
    expect(h.pending.length).toBe(3);
  });

  it('a promoted statement that fails leaves the one behind it to settle on its own outcome', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 6; seq++) h.pipeline.push(item(seq));
    await settle();
    h.pending[0]?.resolve();
    await settle();
    expect(h.pending.length).toBe(3);
    // [3, 4] fails; [5, 6], sent behind it, commits: it stays applied, [3, 4] is retried.
    h.pending[1]?.reject(new Error('database socket error'));
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed).toEqual([
      [1, 2],
      [5, 6],
    ]);
    expect(h.pipeline.statementsInFlight).toBe(0);
    await new Promise((r) => setTimeout(r, 120));
    expect(h.pending.length).toBe(4);
    h.pending[3]?.resolve();
    await settle();
    expect(h.committed.at(-1)).toEqual([3, 4]);
    expect(h.pipeline.size).toBe(0);
  });

  it('when the first fails and the one behind commits, that one stays applied and the first is retried after the backoff', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 4; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.pending.length).toBe(2);
    h.pending[0]?.reject(new Error('database socket error'));
    h.pending[1]?.resolve();
    await settle();
    expect(h.committed).toEqual([[3, 4]]);
    // A failed statement is answered too: nothing is left counted in flight during the backoff.
    expect(h.pipeline.statementsInFlight).toBe(0);
    expect(h.pipeline.size).toBe(2);
    expect(h.pipeline.oldestArrival()).not.toBeNull();
    await new Promise((r) => setTimeout(r, 120));
    expect(h.pending.length).toBe(3);
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed).toEqual([[3, 4], [1, 2]]);
    expect(h.pipeline.size).toBe(0);
  });
});

/** A logger that keeps its lines (level and message) instead of printing them. */
function keptLog(lines: { level: string; msg: string }[]): Logger {
  const keep = (level: string) => (msg: string) => void lines.push({ level, msg });
  const log: Logger = { debug: keep('debug'), info: keep('info'), warn: keep('warn'), error: keep('error'), child: () => log };
  return log;
}

describe('ingest pipeline: what a failed statement logs', () => {
  it('an outage is a warning; a schema fault (a missing table) is an error that says it is not an outage; both withhold the ack and retry', async () => {
    const lines: { level: string; msg: string }[] = [];
    const h = scripted(10, keptLog(lines));
    h.pipeline.push(item(1));
    await settle();
    h.pending[0]?.reject(new Error('[object ErrorEvent]'));
    await settle();
    expect(lines.at(-1)).toEqual({ level: 'warn', msg: 'ingest batch failed; ack withheld, will retry' });
    await new Promise((r) => setTimeout(r, 120));
    h.pending[1]?.reject(Object.assign(new Error('relation "nodes" does not exist'), { code: '42P01' }));
    await settle();
    expect(lines.at(-1)).toEqual({ level: 'error', msg: 'ingest batch failed: not an outage (a code or schema fault); ack withheld, retried until it is mended' });
    expect(h.committed).toEqual([]);
    expect(h.pipeline.size).toBe(1);
    // Mended (the migration ran): the same frame is applied.
    await new Promise((r) => setTimeout(r, 250));
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed).toEqual([[1]]);
  });
});
