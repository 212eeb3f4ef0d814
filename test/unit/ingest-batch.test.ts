import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildFrame, newId, readFrame, type MessageType, type Payload } from '../../src/protocol';
import { buildBatch, type InboundItem } from '../../src/hub/session/ingest-batch';

const node = (id: string): Payload<'node.observed'> => ({
  node_id: id,
  name: id,
  ready: true,
  schedulable: true,
  labels: {},
  taints: [],
  allocatable: { gpus: 8, cpu_millis: 1000, memory_mb: 1000 },
});

/** An accepted frame as the session hands it to the batch builder. */
function item<T extends MessageType>(seq: number, type: T, payload: Payload<T>, replyTo: string | null = null, id = newId()): InboundItem {
  const f = readFrame(buildFrame({ type, payload, seq, reply_to: replyTo, id }));
  if (f.kind !== 'message') throw new Error(`not a message: ${f.kind}`);
  return { seq, id, replyTo, type, arrivedAt: 0, kind: 'message', message: f.message };
}

describe('ingest batch: a complete snapshot in the same batch', () => {
  it('drops what the batch said before the begin about subjects the snapshot does not carry, so the prune removes them', () => {
    const begin = newId();
    const b = buildBatch(
      [
        item(1, 'node.observed', node('stale')),
        item(2, 'node.observed', node('kept-before')),
        item(3, 'resync.begin', { scope: ['node'] }, null, begin),
        item(4, 'node.observed', node('kept-before'), begin),
        item(5, 'node.observed', node('n1'), begin),
        item(6, 'stream.end', { complete: true, count: 2 }, begin),
        item(7, 'node.observed', node('after-end')),
      ],
      {},
    );
    expect(b.batch.prunes).toEqual([{ kind: 'node', begin_seq: 3 }]);
    expect(b.batch.nodes.map((n) => n.node_id).sort()).toEqual(['after-end', 'kept-before', 'n1']);
  });

  it('an incomplete snapshot spares everything the batch wrote', () => {
    const begin = newId();
    const b = buildBatch(
      [
        item(1, 'node.observed', node('stale')),
        item(2, 'resync.begin', { scope: ['node'] }, null, begin),
        item(3, 'node.observed', node('n1'), begin),
        item(4, 'stream.end', { complete: false, count: 1 }, begin),
      ],
      {},
    );
    expect(b.batch.prunes).toEqual([]);
    expect(b.batch.nodes.map((n) => n.node_id).sort()).toEqual(['n1', 'stale']);
  });

  it('a cluster.observed before the begin of a cluster-scoped snapshot that does not carry one is dropped', () => {
    const begin = newId();
    const cluster: Payload<'cluster.observed'> = { kubernetes_version: '1.30', provider: 'eks', region: 'us-east-1', labels: {} };
    const b = buildBatch(
      [
        item(1, 'cluster.observed', cluster),
        item(2, 'resync.begin', { scope: ['cluster'] }, null, begin),
        item(3, 'stream.end', { complete: true, count: 0 }, begin),
      ],
      {},
    );
    expect(b.batch.cluster).toBeNull();
    expect(b.batch.prunes).toEqual([{ kind: 'cluster', begin_seq: 2 }]);
  });
});

describe('ingest batch: a reply_to is looked up as an open stream of its own', () => {
  it.each(['__proto__', 'constructor', 'toString', 'hasOwnProperty'])('reply_to %s finds no stream and writes nothing onto Object.prototype', (name) => {
    const before = Object.getOwnPropertyNames(Object.prototype).sort();
    const poison: InboundItem = { seq: 1, id: newId(), replyTo: name, type: 'node.observed', arrivedAt: 0, kind: 'poison', reason: 'envelope reply_to is not a ULID' };
    const end = { ...item(2, 'stream.end', { complete: true, count: 0 }), replyTo: name };
    const b = buildBatch([poison, end], {});
    expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(before);
    expect(({} as Record<string, unknown>).count).toBeUndefined();
    expect(({} as Record<string, unknown>).tainted).toBeUndefined();
    expect(b.batch.rejections.map((r) => r.reason)).toEqual(['envelope reply_to is not a ULID', 'stream.end for a stream that is not open']);
    expect(b.resyncs).toEqual({});
  });
});

describe('ingest batch: a stream member is counted once', () => {
  it('a member applied past a hole and delivered again after a resume counts once, and the snapshot still prunes', () => {
    const begin = newId();
    const m4 = item(4, 'node.observed', node('n1'), begin);
    const m5 = item(5, 'node.observed', node('n2'), begin);
    const end = item(6, 'stream.end', { complete: true, count: 2 }, begin);
    // seq 3 begins the stream; 4 waits on a lock (a hole) while 5 applies past it.
    const first = buildBatch([item(3, 'resync.begin', { scope: ['node'] }, null, begin)], {});
    const past = buildBatch([m5], first.resyncs);
    expect(past.resyncs[begin]?.count).toBe(1);
    // The session closes 1013; the operator resumes from the cursor (3) and replays 4, 5, 6.
    const replayed = buildBatch([m4, m5, end], past.resyncs);
    expect(replayed.streams).toEqual([{ beginId: begin, seq: 6, complete: true, reason: null }]);
    expect(replayed.batch.prunes).toEqual([{ kind: 'node', begin_seq: 3 }]);
  });

  it('counted seqs at or below the cursor are forgotten, the count kept', async () => {
    const { forgetCountedThrough } = await import('../../src/hub/session/ingest-streams');
    const begin = newId();
    const b = buildBatch(
      [item(3, 'resync.begin', { scope: ['node'] }, null, begin), item(4, 'node.observed', node('a'), begin), item(5, 'node.observed', node('b')), item(6, 'node.observed', node('c'), begin), item(8, 'node.observed', node('d'), begin)],
      {},
    );
    expect(b.resyncs[begin]?.counted).toEqual([[4, 4], [6, 6], [8, 8]]);
    forgetCountedThrough(b.resyncs, 6);
    expect(b.resyncs[begin]).toMatchObject({ count: 3, counted: [[8, 8]] });
  });
});

describe('ingest batch: countOnce keeps the counted seqs as disjoint ranges', () => {
  it('counts each seq once in any arrival order, and the ranges are exactly the seqs counted', async () => {
    const { countOnce } = await import('../../src/hub/session/ingest-streams');
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 80 }), { maxLength: 300 }), (seqs) => {
        const s = { beginSeq: 0, scope: ['node'], count: 0, tainted: false, counted: [] as [number, number][] };
        const seen = new Set<number>();
        for (const seq of seqs) {
          expect(countOnce(s, seq)).toBe(!seen.has(seq));
          seen.add(seq);
        }
        // Sorted, disjoint, never adjacent, and covering exactly what was seen.
        const covered: number[] = [];
        s.counted.forEach(([a, b], i) => {
          expect(a).toBeLessThanOrEqual(b);
          if (i > 0) expect(a).toBeGreaterThan((s.counted[i - 1] as [number, number])[1] + 1);
          for (let x = a; x <= b; x++) covered.push(x);
        });
        expect(covered).toEqual([...seen].sort((x, y) => x - y));
      }),
    );
  });
});

describe('ingest batch: open resync streams are bounded', () => {
  it('a begin past the bound ends the oldest open stream incomplete; a begin already open replaces itself', async () => {
    const { MAX_OPEN_RESYNCS } = await import('../../src/hub/session/ingest-streams');
    const ids = Array.from({ length: MAX_OPEN_RESYNCS + 1 }, () => newId());
    const b = buildBatch(
      ids.map((id, i) => item(i + 1, 'resync.begin', { scope: ['node'] }, null, id)),
      {},
    );
    expect(Object.keys(b.resyncs).sort()).toEqual(ids.slice(1).sort());
    expect(b.streams).toEqual([
      { beginId: ids[0], seq: MAX_OPEN_RESYNCS + 1, complete: false, reason: `superseded: more than ${MAX_OPEN_RESYNCS} resync streams open at once` },
    ]);
    // The superseded stream's end is one for a stream that is not open: recorded, nothing pruned.
    const end = buildBatch([item(100, 'stream.end', { complete: true, count: 0 }, ids[0])], b.resyncs);
    expect(end.batch.prunes).toEqual([]);
    expect(end.batch.rejections.map((r) => r.reason)).toEqual(['stream.end for a stream that is not open']);
    // A replayed begin (same id) at the bound supersedes nothing.
    const again = buildBatch([item(3, 'resync.begin', { scope: ['node'] }, null, ids[2])], b.resyncs);
    expect(again.streams).toEqual([]);
    expect(Object.keys(again.resyncs)).toHaveLength(MAX_OPEN_RESYNCS);
  });
});

// Spec "Poison frames": a frame the database refuses is recorded, however it was batched. Within a
// batch the last frame about a subject wins, so an earlier one never reached the statement, and a
// frame Postgres would refuse (text it cannot hold) was acknowledged with no record (found by
// review). The batch says where it hides such a row; the pipeline ends the batch before that.
describe('ingest batch: a row the database may refuse is never hidden from it', () => {
  const refusable = (id: string) => ({ ...node(id), name: 'bad\u0000name' });
  const at = (items: InboundItem[]) => buildBatch(items, {}).hidesRefusable;

  it('names the first frame that replaces or removes a refusable one, of every kind of subject', () => {
    expect(at([item(1, 'node.observed', refusable('x')), item(2, 'node.observed', node('x'))])).toBe(2);
    expect(at([item(1, 'node.observed', refusable('x')), item(2, 'node.removed', { node_id: 'x' })])).toBe(2);
    expect(at([item(1, 'node.observed', node('x')), item(2, 'node.observed', node('y')), item(3, 'node.observed', refusable('y')), item(4, 'node.observed', refusable('y')), item(5, 'node.observed', refusable('x'))])).toBe(4);
    const gpu: Payload<'device.observed'> = { device_id: 'g', node_id: 'x', vendor: 'v', model: 'm', memory_total_mb: 1, health: 'healthy', driver_version: '1' };
    expect(at([item(1, 'device.observed', { ...gpu, model: 'lone \ud800' }), item(2, 'device.removed', { device_id: 'g' })])).toBe(2);
    const cluster: Payload<'cluster.observed'> = { kubernetes_version: '1.30', provider: 'eks', region: 'r', labels: {} };
    expect(at([item(1, 'cluster.observed', { ...cluster, labels: { 'k\u0000': 'v' } }), item(2, 'cluster.observed', cluster)])).toBe(2);
  });

  it('names the begin of a snapshot whose prune drops a refusable row unwritten', () => {
    const begin = newId();
    const b = buildBatch(
      [
        item(1, 'node.observed', refusable('stale')),
        item(2, 'resync.begin', { scope: ['node'] }, null, begin),
        item(3, 'node.observed', node('n1'), begin),
        item(4, 'stream.end', { complete: true, count: 1 }, begin),
      ],
      {},
    );
    expect(b.hidesRefusable).toBe(2);
  });

  it('names nothing when what is replaced is storable (an emoji is), or when the refusable frame is the last', () => {
    expect(at([item(1, 'node.observed', { ...node('x'), name: '😀' }), item(2, 'node.observed', node('x'))])).toBeNull();
    expect(at([item(1, 'node.observed', node('x')), item(2, 'node.observed', refusable('x'))])).toBeNull();
    expect(at([item(1, 'node.observed', refusable('x')), item(2, 'node.observed', refusable('y'))])).toBeNull();
  });
});
