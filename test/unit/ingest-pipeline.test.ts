/**
 * The ingest pipeline's scheduling, with a scripted statement in place of Postgres (what the
 * statement does is covered against a real database in test/hub/observed.test.ts and friends).
 */
import { describe, expect, it } from 'vitest';
import type { Sql } from '../../src/hub/db/sql';
import { createLogger, type Logger } from '../../src/hub/log';
import type { InboundItem } from '../../src/hub/session/ingest-batch';
import { IngestPipeline, unappliedBounds, type IngestHost } from '../../src/hub/session/ingest-pipeline';
import { QueryTimeoutError } from '../../src/hub/pg-errors';
import { hubConfig } from '../../src/hub/config';
import { buildFrame, newId, readFrame } from '../../src/protocol';
import type { OpResync } from '../../src/hub/session/store';
import type { ScheduleLimits } from '../../src/hub/session/ingest-schedule';

const item = (seq: number): InboundItem => ({ kind: 'unknown', seq, id: `f${seq}`, replyTo: null, type: 'future.thing', arrivedAt: Date.now() });

/** Microtasks only: what runs in the same turn. */
async function sameTurn(): Promise<void> {
  for (let i = 0; i < 50; i++) await Promise.resolve();
}

/** Wait (real timers) until `cond` holds: a retry after its backoff, whenever a loaded machine runs it. */
async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

/** The pipeline ends its turn after settling a commit (the ack leaves first): let it go on. */
async function settle(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    await sameTurn();
    await new Promise((r) => setTimeout(r, 0));
  }
}

function harness(onCommitted: (seqs: number[], pipeline: IngestPipeline) => void = () => {}, lingerMs = 0, maxBatch = 100) {
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
    commitFailed: (err) => {
      throw err;
    },
    wentBack: () => {
      throw new Error('went back');
    },
    fenceLost: () => {
      throw new Error('fence lost');
    },
    keepRetrying: () => true,
    outcomeUnknown: () => undefined,
    log: createLogger({}, 'error'),
  };
  const pipeline = new IngestPipeline(host, maxBatch, {}, lingerMs);
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

describe('ingest pipeline: lingering for more frames (INGEST_LINGER_MS)', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  /** Frame 1, then frames 2 and 3 pushed 20 and 40 ms later, each in a turn of its own. */
  async function spaced(h: ReturnType<typeof harness>): Promise<void> {
    h.pipeline.push(item(1));
    await sleep(20);
    h.pipeline.push(item(2));
    await sleep(20);
    h.pipeline.push(item(3));
  }

  it('frames that arrive within the linger of the oldest share one statement, where without one each went alone', async () => {
    const lingering = harness(() => {}, 1_000);
    await spaced(lingering);
    expect(lingering.committed).toEqual([]);
    await sleep(1_100);
    await settle();
    expect(lingering.committed).toEqual([[1, 2, 3]]);
    expect(lingering.statements()).toBe(1);

    const eager = harness();
    await spaced(eager);
    await settle();
    expect(eager.committed).toEqual([[1], [2], [3]]);
  });

  it('a full batch does not wait', async () => {
    const h = harness(() => {}, 60_000, 10);
    for (let seq = 1; seq <= 10; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.committed).toEqual([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]);
  });

  it('is off unless configured, and bounded', () => {
    expect(hubConfig({ HUB_VERSION: '0.1.0' }).INGEST_LINGER_MS).toBe(0);
    expect(hubConfig({ HUB_VERSION: '0.1.0', INGEST_LINGER_MS: '5' }).INGEST_LINGER_MS).toBe(5);
    expect(() => hubConfig({ HUB_VERSION: '0.1.0', INGEST_LINGER_MS: '5000' })).toThrow(/INGEST_LINGER_MS: must be at most 1000/);
    expect(() => hubConfig({ HUB_VERSION: '0.1.0', INGEST_LINGER_MS: '-1' })).toThrow(/INGEST_LINGER_MS/);
  });

  it('a stop does not wait for the linger, and applies nothing it was holding', async () => {
    const h = harness(() => {}, 60_000);
    h.pipeline.push(item(1));
    await settle();
    const t0 = performance.now();
    await h.pipeline.quiesce();
    expect(performance.now() - t0).toBeLessThan(5_000);
    expect(h.committed).toEqual([]);
    expect(h.pipeline.size).toBe(0);
  });
});

/** Statements that answer when the test says, in the order they were sent. */
function scripted(maxBatch: number, log: Logger = createLogger({}, 'error'), resyncs: () => Record<string, OpResync> = () => ({}), limits: Partial<ScheduleLimits> = {}) {
  const committed: number[][] = [];
  const unknown: unknown[] = [];
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
    resyncs,
    sentDesired: () => null,
    committed: (items) => committed.push(items.map((i) => i.seq)),
    commitFailed: (err) => {
      throw err;
    },
    wentBack: () => {
      throw new Error('went back');
    },
    fenceLost: () => {
      throw new Error('fence lost');
    },
    keepRetrying: () => true,
    outcomeUnknown: (err) => unknown.push(err),
    log,
  };
  return { pipeline: new IngestPipeline(host, maxBatch, limits), committed, pending, unknown };
}

describe('ingest pipeline: an open operator resync stream', () => {
  // Open, and named by no frame unless the test says so: one a crashed operator process began.
  const open = (): Record<string, OpResync> => ({ B: { beginSeq: 1, scope: ['node'], count: 0, tainted: false, counted: [] } });
  const member = (seq: number): InboundItem => ({ ...item(seq), replyTo: 'B' });

  it('frames outside it still go two statements at a time; a statement with a member of it has none behind, and none goes behind carrying one', async () => {
    const h = scripted(2, undefined, open);
    for (let seq = 2; seq <= 5; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.pending.length).toBe(2);
    h.pending[0]?.resolve();
    h.pending[1]?.resolve();
    await settle();
    expect(h.committed).toEqual([[2, 3], [4, 5]]);

    // The statement ahead carries members: nothing behind it (its counts would assume they applied).
    for (const x of [member(6), member(7), item(8), item(9)]) h.pipeline.push(x);
    await settle();
    expect(h.pending.length).toBe(3);
    h.pending[2]?.resolve();
    await settle();
    expect(h.pending.length).toBe(4);
    h.pending[3]?.resolve();
    await settle();
    expect(h.committed.slice(2)).toEqual([[6, 7], [8, 9]]);

    // The one behind would start with a member: not sent.
    for (const x of [item(10), item(11), member(12), item(13)]) h.pipeline.push(x);
    await settle();
    expect(h.pending.length).toBe(5);
    h.pending[4]?.resolve();
    await settle();
    expect(h.pending.length).toBe(6);
    h.pending[5]?.resolve();
    await settle();
    expect(h.committed.slice(4)).toEqual([[10, 11], [12, 13]]);
  });
});

describe('ingest pipeline: a statement given up on unanswered', () => {
  it('halts: no retry on another connection (it could commit before the abandoned one) until the next hello quiesces it', async () => {
    const h = scripted(2);
    for (let seq = 1; seq <= 3; seq++) h.pipeline.push(item(seq));
    await settle();
    expect(h.pending.length).toBe(2);
    const timeout = new QueryTimeoutError(1500);
    h.pending[0]?.reject(timeout);
    h.pending[1]?.reject(new QueryTimeoutError(1500));
    await settle();
    expect(h.unknown).toEqual([timeout]);
    expect(h.committed).toEqual([]);
    // Nothing is retried and nothing new runs: the frames are replayed after the operator's resume.
    h.pipeline.push(item(4));
    await settle();
    expect(h.pending.length).toBe(2);
    await h.pipeline.quiesce();
    expect(h.pipeline.size).toBe(0);
    h.pipeline.push(item(1));
    await settle();
    expect(h.pending.length).toBe(3);
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed).toEqual([[1]]);
  });

  it('a statement the server answered with its own statement timeout is retried, not halted on', async () => {
    const h = scripted(5);
    h.pipeline.push(item(1));
    await settle();
    h.pending[0]?.reject(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }));
    await new Promise((r) => setTimeout(r, 300));
    await settle();
    expect(h.unknown).toEqual([]);
    expect(h.pending.length).toBe(2);
    h.pending[1]?.resolve();
    await settle();
    expect(h.committed).toEqual([[1]]);
  });
});

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
    // A backoff longer than `settle` can take on a loaded machine (four timer turns took over the
    // default 50 ms in a CI run, and the retry was already in flight when nothing should be).
    const h = scripted(2, undefined, undefined, { baseDelayMs: 500 });
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
    // After the backoff, [3, 4] again.
    await until(() => h.pending.length >= 4);
    expect(h.pending.length).toBe(4);
    h.pending[3]?.resolve();
    await settle();
    expect(h.committed.at(-1)).toEqual([3, 4]);
    expect(h.pipeline.size).toBe(0);
  });

  it('when the first fails and the one behind commits, that one stays applied and the first is retried after the backoff', async () => {
    // A backoff longer than `settle` can take on a loaded machine (as above).
    const h = scripted(2, undefined, undefined, { baseDelayMs: 500 });
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
    await until(() => h.pending.length >= 3);
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
    await until(() => h.pending.length >= 2);
    h.pending[1]?.reject(Object.assign(new Error('relation "nodes" does not exist'), { code: '42P01' }));
    await settle();
    expect(lines.at(-1)).toEqual({ level: 'error', msg: 'ingest batch failed: not an outage (a code or schema fault); ack withheld, retried until it is mended' });
    expect(h.committed).toEqual([]);
    expect(h.pipeline.size).toBe(1);
    // Mended (the migration ran): the same frame is applied.
    await until(() => h.pending.length >= 3);
    h.pending[2]?.resolve();
    await settle();
    expect(h.committed).toEqual([[1]]);
  });
});

const node = (id: string) => ({ node_id: id, name: id, ready: true, schedulable: true, labels: { zone: 'x'.repeat(200) }, taints: [], allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 } });

describe('ingest pipeline: the size of a statement', () => {
  it('one the database refuses as too large (54000: a jsonb parameter past 256 MiB) is split until it fits and applied, not retried whole forever (found by a review)', async () => {
    const NODES = 64;
    const nodeItem = (seq: number): InboundItem =>
      ({ seq, id: `f${seq}`, replyTo: null, type: 'node.observed', arrivedAt: Date.now(), kind: 'message', message: { type: 'node.observed', payload: node(`n${seq}`) } }) as InboundItem;
    // Scaled-down stand-in for jsonb's 268,435,455-byte limit: 40 of these rows fit, 64 do not.
    const LIMIT = 40 * JSON.stringify(['n00', 'n00', true, true, node('n00').labels, [], 1, 1, 1, 1]).length;
    const statements: number[] = [];
    const sql: Sql = {
      async query<R>(_text: string, params: unknown[] = [], name?: string) {
        // A lean statement's rows come right after the fence's four parameters, the full one's after the cluster's.
        const nodes = String((name?.startsWith('wingsmith_ingest_rows') ? params[4] : params[5]) ?? '[]');
        statements.push(JSON.parse(nodes).length);
        if (nodes.length > LIMIT) {
          throw Object.assign(new Error('total size of jsonb array elements exceeds the maximum of 268435455 bytes'), { code: '54000' });
        }
        return { rows: [{ fenced: true, pruned: 0, unknown_ops: [] }] as R[], rowCount: 1 };
      },
    };
    const committed: number[] = [];
    const pipeline = new IngestPipeline(
      {
        sql,
        fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
        resyncs: () => ({}),
        sentDesired: () => null,
        committed: (items) => void committed.push(...items.map((i) => i.seq)),
        commitFailed: (err) => {
          throw err;
        },
        wentBack: () => {
          throw new Error('went back');
        },
        fenceLost: () => {
          throw new Error('fence lost');
        },
        keepRetrying: () => true,
        outcomeUnknown: () => undefined,
        log: createLogger({}, 'error'),
      },
      2_000,
    );
    for (let seq = 1; seq <= NODES; seq++) pipeline.push(nodeItem(seq));
    const deadline = Date.now() + 4_000;
    while (committed.length < NODES && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await pipeline.quiesce();
    // Before: statements of 64, 64, 64, … rows (every one refused), nothing committed.
    expect({ committed: committed.length, statementRows: statements.slice(0, 6) }).toEqual({ committed: NODES, statementRows: expect.arrayContaining([32]) });
  });

  it('carries at most its byte bound of frames (always at least one), whatever the frame bound allows', async () => {
    const sizes: number[] = [];
    const sql: Sql = {
      async query<R>() {
        return { rows: [{ fenced: true, pruned: 0, unknown_ops: [] }] as R[], rowCount: 1 };
      },
    };
    const committed: number[][] = [];
    const pipeline = new IngestPipeline(
      {
        sql,
        fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
        resyncs: () => ({}),
        sentDesired: () => null,
        committed: (items) => void committed.push(items.map((i) => i.bytes ?? 0)),
        commitFailed: (err) => {
          throw err;
        },
        wentBack: () => {
          throw new Error('went back');
        },
        fenceLost: () => {
          throw new Error('fence lost');
        },
        keepRetrying: () => true,
        outcomeUnknown: () => undefined,
        log: createLogger({}, 'error'),
      },
      2_000,
      { maxBytes: 1_000 },
    );
    // 300-byte frames, and one of 5,000 (over the bound alone: it still goes, alone).
    for (let seq = 1; seq <= 20; seq++) pipeline.push({ ...item(seq), bytes: seq === 7 ? 5_000 : 300 });
    expect(pipeline.bytes).toBe(19 * 300 + 5_000);
    const deadline = Date.now() + 4_000;
    while (committed.flat().length < 20 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    await pipeline.quiesce();
    for (const s of committed) sizes.push(s.reduce((a, b) => a + b, 0));
    expect(committed.flat()).toHaveLength(20);
    expect(committed.every((s) => s.length === 1 || s.reduce((a, b) => a + b, 0) <= 1_000), JSON.stringify(committed)).toBe(true);
    expect(committed.some((s) => s.length === 1 && s[0] === 5_000)).toBe(true);
    expect(pipeline.bytes).toBe(0);
  });
});

describe('ingest pipeline: how much a session holds unapplied', () => {
  it('never less than the replay window the welcome names, in frames and in bytes (plus one frame), so an operator replaying its whole window is not told to come back (found by a review)', () => {
    const cfg = { INGEST_BATCH_FRAMES: 2_000, REPLAY_BUFFER_FRAMES: 50_000, REPLAY_BUFFER_BYTES: 64 << 20, MAX_FRAME_BYTES: 1 << 20 };
    expect(unappliedBounds(cfg)).toEqual({ frames: 100_000, bytes: (64 << 20) + (1 << 20) });
    // Small batches: the count bound was 50 batches (25,000 frames), half the window.
    expect(unappliedBounds({ ...cfg, INGEST_BATCH_FRAMES: 500 }).frames).toBe(50_000);
  });
});

// Spec "Poison frames": a frame the database refuses is recorded however it was batched. A frame
// replaced by a later one about the same subject never reached the statement, so one Postgres would
// refuse was committed as applied with no record (found by review). The batch now ends before the
// frame that would hide it, in the statement ahead and in the one sent behind it alike.
describe('ingest pipeline: a frame the database would refuse is not hidden by a later one in its batch', () => {
  const observed = (seq: number, nodeId: string, name = nodeId): InboundItem => {
    const f = readFrame(
      buildFrame({
        type: 'node.observed',
        payload: { node_id: nodeId, name, ready: true, schedulable: true, labels: {}, taints: [], allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 } },
        seq,
        reply_to: null,
        id: newId(),
      }),
    );
    if (f.kind !== 'message') throw new Error(f.kind);
    return { seq, id: newId(), replyTo: null, type: 'node.observed', arrivedAt: Date.now(), kind: 'message', message: f.message };
  };

  // The POISON lines are the point of other tests; here they would only fill the output.
  const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, child: () => quiet };

  /** Postgres as far as NUL goes: a statement carrying one is refused (22P05), permanently. */
  function refusingNul(maxBatch: number) {
    const settled: [seq: number, kind: string][] = [];
    const rejected: number[] = [];
    const sql: Sql = {
      async query<R>(_text: string, params: unknown[] = []) {
        if (params.some((p) => typeof p === 'string' && p.includes('\\u0000'))) {
          throw Object.assign(new Error('unsupported Unicode escape sequence'), { code: '22P05' });
        }
        return { rows: [{ fenced: true, pruned: 0, unknown_ops: [] }] as R[], rowCount: 1 };
      },
    };
    const host: IngestHost = {
      sql,
      fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
      resyncs: () => ({}),
      sentDesired: () => null,
      committed: (items, built) => {
        settled.push(...items.map((i) => [i.seq, i.kind] as [number, string]));
        rejected.push(...built.batch.rejections.map((r) => r.seq));
      },
      commitFailed: (err) => {
        throw err;
      },
      wentBack: () => {
        throw new Error('went back');
      },
      fenceLost: () => {
        throw new Error('fence lost');
      },
      keepRetrying: () => true,
      outcomeUnknown: () => undefined,
      log: quiet,
    };
    return { pipeline: new IngestPipeline(host, maxBatch), settled, rejected };
  }

  async function drained(p: IngestPipeline): Promise<void> {
    for (let i = 0; i < 200 && p.size > 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(p.size).toBe(0);
  }

  it('in the statement ahead', async () => {
    const h = refusingNul(100);
    h.pipeline.push(observed(1, 'x', 'bad\u0000'));
    h.pipeline.push(observed(2, 'x'));
    h.pipeline.push(observed(3, 'y'));
    await drained(h.pipeline);
    expect(h.rejected).toEqual([1]);
    expect(new Map(h.settled)).toEqual(new Map([[1, 'poison'], [2, 'message'], [3, 'message']]));
  });

  it('in the statement sent behind it', async () => {
    const h = refusingNul(2);
    // [1, 2] go first, [3, 4] behind them: 4 would hide 3.
    for (const [seq, id, name] of [[1, 'a'], [2, 'b'], [3, 'x', 'bad\u0000'], [4, 'x'], [5, 'c']] as const) h.pipeline.push(observed(seq, id, name));
    await drained(h.pipeline);
    expect(h.rejected).toEqual([3]);
    expect(new Map(h.settled)).toEqual(new Map([[1, 'message'], [2, 'message'], [3, 'poison'], [4, 'message'], [5, 'message']]));
  });
});
