import { describe, expect, it } from 'vitest';
import type { DesiredItem } from '../../src/hub/db/desired-admin';
import { PutCoalescer, takeBatch, type BatchWritten, type CoalesceHost } from '../../src/hub/db/desired-coalesce';

const SERVING: DesiredItem['serving'] = { engine: 'vllm', model: 'm', image: 'i', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 };
const item = (id: string, min = 1): DesiredItem => ({ deployment_id: id, workload_id: 'w', min_replicas: min, max_replicas: 4, serving: SERVING });

/** A cluster's revision counter, written by statements that finish when the test says so. */
class FakeStore implements CoalesceHost {
  revision = 0;
  statements: string[][] = [];
  pokes: { first: number; ids: string[] }[] = [];
  private gates: (() => void)[] = [];
  /** Data the "database" refuses (a permanent error, rolled back). */
  refuse = new Set<string>();
  missing = new Set<string>();
  holding = true;

  async write(cluster: string, items: readonly DesiredItem[]): Promise<BatchWritten | null> {
    this.statements.push(items.map((i) => i.deployment_id));
    if (this.holding) await new Promise<void>((r) => this.gates.push(r));
    if (this.missing.has(cluster)) return null;
    if (items.some((i) => this.refuse.has(i.deployment_id))) throw Object.assign(new Error('violates check'), { code: '23514' });
    const first = this.revision + 1;
    this.revision += items.length;
    return { cluster_uid: `uid-${cluster}`, first_revision: first, owner_session: 'owner' };
  }

  /** The next `written` throws (a bug in the poke). */
  pokeThrows = false;
  pokeFailures: unknown[] = [];

  written(w: BatchWritten, items: readonly DesiredItem[]): void {
    if (this.pokeThrows) {
      this.pokeThrows = false;
      throw new Error('poke bug');
    }
    this.pokes.push({ first: w.first_revision, ids: items.map((i) => i.deployment_id) });
  }

  pokeFailed(err: unknown): void {
    this.pokeFailures.push(err);
  }

  itemFault(err: unknown): boolean {
    return (err as { code?: string }).code?.startsWith('23') ?? false;
  }

  /** Let every statement started so far finish, then let the queue move on. */
  async release(): Promise<void> {
    const g = this.gates.splice(0);
    for (const r of g) r();
    for (let i = 0; i < 5; i++) await Promise.resolve();
  }
}

async function settle(store: FakeStore, ...ps: Promise<unknown>[]): Promise<void> {
  for (let i = 0; i < 20; i++) await store.release();
  await Promise.allSettled(ps);
}

describe('desired PUT coalescing (group commit per cluster)', () => {
  it('a poke that throws after a commit answers that PUT as written, is reported, and later PUTs of the cluster are still written', async () => {
    const store = new FakeStore();
    store.holding = false;
    store.pokeThrows = true;
    const c = new PutCoalescer(store);
    expect(await c.put('a', item('d1'))).toEqual({ cluster_uid: 'uid-a', revision: 1, owner_session: 'owner' });
    expect(store.pokeFailures).toHaveLength(1);
    expect(c.pending('a')).toBe(0);
    const next = await Promise.race([c.put('a', item('d2')), new Promise((r) => setTimeout(() => r('still waiting'), 500))]);
    expect(next).toEqual({ cluster_uid: 'uid-a', revision: 2, owner_session: 'owner' });
    expect(store.pokes).toEqual([{ first: 2, ids: ['d2'] }]);
  });

  it('writes a lone PUT at once, alone', async () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store);
    const p = c.put('a', item('d1'));
    expect(store.statements).toEqual([['d1']]);
    await settle(store, p);
    expect(await p).toEqual({ cluster_uid: 'uid-a', revision: 1, owner_session: 'owner' });
  });

  it('writes the PUTs that arrive while a statement runs in one statement, each with its own revision in arrival order, and pokes once', async () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store);
    const ps = ['d1', 'd2', 'd3', 'd4'].map((id) => c.put('a', item(id)));
    expect(store.statements).toEqual([['d1']]);
    // d1 is in the statement; the other three wait for the next one.
    expect(c.pending('a')).toBe(3);
    await settle(store, ...ps);
    expect(store.statements).toEqual([['d1'], ['d2', 'd3', 'd4']]);
    expect((await Promise.all(ps)).map((w) => w?.revision)).toEqual([1, 2, 3, 4]);
    expect(store.pokes).toEqual([
      { first: 1, ids: ['d1'] },
      { first: 2, ids: ['d2', 'd3', 'd4'] },
    ]);
    expect(c.pending('a')).toBe(0);
  });

  it('keeps clusters apart: another cluster is written at once, beside the first', () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store);
    void c.put('a', item('d1'));
    void c.put('b', item('d1'));
    expect(store.statements).toEqual([['d1'], ['d1']]);
  });

  it('never names a deployment twice in one statement: the second PUT of it waits for the next, and the later one wins', async () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store);
    const ps = [c.put('a', item('d0')), c.put('a', item('d1', 1)), c.put('a', item('d2')), c.put('a', item('d1', 2)), c.put('a', item('d3'))];
    await settle(store, ...ps);
    expect(store.statements).toEqual([['d0'], ['d1', 'd2'], ['d1', 'd3']]);
    expect((await Promise.all(ps)).map((w) => w?.revision)).toEqual([1, 2, 3, 4, 5]);
  });

  it('caps a batch at its limit', async () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store, { maxBatch: 2 });
    const ps = ['d0', 'd1', 'd2', 'd3', 'd4'].map((id) => c.put('a', item(id)));
    await settle(store, ...ps);
    expect(store.statements).toEqual([['d0'], ['d1', 'd2'], ['d3', 'd4']]);
  });

  it("a batch refused for one item's data is retried item by item: the bad one gets its error, the others are written", async () => {
    const store = new FakeStore();
    store.refuse.add('bad');
    const c = new PutCoalescer(store);
    const first = c.put('a', item('d0'));
    const rest = [c.put('a', item('d1')), c.put('a', item('bad')), c.put('a', item('d2'))];
    await settle(store, first, ...rest);
    const [d1, bad, d2] = await Promise.allSettled(rest);
    expect(d1).toMatchObject({ status: 'fulfilled', value: { revision: 2 } });
    expect(bad).toMatchObject({ status: 'rejected', reason: { code: '23514' } });
    expect(d2).toMatchObject({ status: 'fulfilled', value: { revision: 3 } });
    expect(store.statements).toEqual([['d0'], ['d1', 'bad', 'd2'], ['d1'], ['bad'], ['d2']]);
  });

  it('a failure that may not have rolled back (not the data) fails the whole batch, without writing its items again', async () => {
    const store = new FakeStore();
    const c = new PutCoalescer(store);
    const first = c.put('a', item('d0'));
    const rest = [c.put('a', item('d1')), c.put('a', item('d2'))];
    store.write = async (_cluster, items) => {
      store.statements.push(items.map((i) => i.deployment_id));
      throw Object.assign(new Error('connection lost'), { code: '08006' });
    };
    await settle(store, first, ...rest);
    for (const r of await Promise.allSettled(rest)) expect(r).toMatchObject({ status: 'rejected', reason: { code: '08006' } });
    expect(store.statements).toEqual([['d0'], ['d1', 'd2']]);
    // The queue is not wedged: the next PUT is written.
    store.write = FakeStore.prototype.write.bind(store);
    store.holding = false;
    expect(await c.put('a', item('d3'))).toMatchObject({ revision: 2 });
  });

  it('answers null to every PUT of a batch for a cluster that does not exist, and pokes no one', async () => {
    const store = new FakeStore();
    store.missing.add('nope');
    const c = new PutCoalescer(store);
    const ps = [c.put('nope', item('d1')), c.put('nope', item('d2'))];
    await settle(store, ...ps);
    expect(await Promise.all(ps)).toEqual([null, null]);
    expect(store.pokes).toEqual([]);
  });

  it('refuses, unwritten, a PUT that waited behind its cluster\'s statement past the wait bound; the rest are written', async () => {
    const store = new FakeStore();
    let now = 0;
    const c = new PutCoalescer(store, { maxWaitMs: 1_500, now: () => now });
    const first = c.put('a', item('d0'));
    const early = c.put('a', item('d1'));
    now = 1_000;
    const late = c.put('a', item('d2'));
    // d0's statement is slow: when it ends, d1 has waited 2 s and d2 1 s.
    now = 2_000;
    await settle(store, first, early, late);
    await expect(early).rejects.toMatchObject({ name: 'QueryTimeoutError', message: expect.stringContaining('waited 2000 ms') });
    expect(await late).toMatchObject({ revision: 2 });
    expect(store.statements).toEqual([['d0'], ['d2']]);
    expect(store.pokes.map((p) => p.ids)).toEqual([['d0'], ['d2']]);
  });

  it('retrying a refused batch item by item checks each item\'s wait before its statement', async () => {
    const store = new FakeStore();
    store.refuse.add('bad');
    store.holding = false;
    let now = 0;
    const c = new PutCoalescer(store, { maxWaitMs: 2_500, now: () => now });
    // Each statement takes a second of the clock.
    const write = store.write.bind(store);
    store.write = (cluster, items) => write(cluster, items).finally(() => (now += 1_000));
    const first = c.put('a', item('d0'));
    const rest = [c.put('a', item('d1')), c.put('a', item('bad')), c.put('a', item('d2'))];
    await settle(store, first, ...rest);
    const [d1, bad, d2] = await Promise.allSettled(rest);
    // The batch starts at 1 s and is refused at 2 s; d1 alone starts at 2 s (within 2.5 s) and
    // ends at 3 s, past the wait of the two still behind it.
    expect(d1).toMatchObject({ status: 'fulfilled', value: { revision: 2 } });
    expect(bad).toMatchObject({ status: 'rejected', reason: { name: 'QueryTimeoutError' } });
    expect(d2).toMatchObject({ status: 'rejected', reason: { name: 'QueryTimeoutError' } });
    expect(store.statements).toEqual([['d0'], ['d1', 'bad', 'd2'], ['d1']]);
  });

  it('caps a batch by its serving bytes too: large PUTs that queue together go out in several statements, a lone one whatever its size', async () => {
    const store = new FakeStore();
    const large = (id: string): DesiredItem => ({ ...item(id), serving: { ...SERVING, env: { BLOB: 'x'.repeat(400) } } });
    const c = new PutCoalescer(store, { maxBytes: 1_000 });
    const ps = ['d0', 'd1', 'd2', 'd3', 'd4', 'd5'].map((id) => c.put('a', large(id)));
    await settle(store, ...ps);
    // Each serving is about 530 bytes as JSON: one fits under 1,000, two do not.
    expect(store.statements).toEqual([['d0'], ['d1'], ['d2'], ['d3'], ['d4'], ['d5']]);
    const store2 = new FakeStore();
    const small = new PutCoalescer(store2, { maxBytes: 1_000 });
    const qs = ['e0', 'e1', 'e2', 'e3', 'e4'].map((id) => small.put('a', item(id)));
    await settle(store2, ...qs);
    expect(store2.statements).toEqual([['e0'], ['e1', 'e2', 'e3', 'e4']]);
    expect((await Promise.all([...ps, ...qs])).every((w) => w !== null)).toBe(true);
  });

  it('takeBatch takes at least one item and stops before a repeated deployment', () => {
    const q = [{ item: item('a') }, { item: item('a') }];
    expect(takeBatch(q, 10)).toHaveLength(1);
    expect(q).toHaveLength(1);
  });
});
