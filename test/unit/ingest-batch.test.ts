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
