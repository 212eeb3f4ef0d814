import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InboundResyncs, ObservedResync } from '../../../src/operator/resync';
import { newId, type Payload } from '../../../src/protocol';
import { SNAPSHOT } from './support/harness';

function drain(stream: ObservedResync) {
  const out = [];
  for (let item = stream.next(); item; item = stream.next()) {
    out.push(item);
    if (item.type !== 'resync.begin' && item.type !== 'stream.end') stream.wrote(item);
  }
  return out;
}

const node = (i: number): Payload<'node.observed'> => ({ ...SNAPSHOT.nodes[0]!, node_id: `node-${i}`, name: `node-${i}` });

describe('observed resync framing', () => {
  it('opens with resync.begin, carries every object replying to it, and ends with the count it carried', () => {
    const stream = new ObservedResync(SNAPSHOT, newId);
    const items = drain(stream);
    expect(items[0]).toMatchObject({ type: 'resync.begin', id: stream.beginId, payload: { scope: ['cluster', 'node', 'device', 'deployment'] } });
    const body = items.slice(1, -1);
    expect(body.map((i) => i.type)).toEqual(['cluster.observed', 'node.observed', 'device.observed']);
    expect(body.every((i) => i.replyTo === stream.beginId)).toBe(true);
    expect(items.at(-1)).toMatchObject({ type: 'stream.end', replyTo: stream.beginId, payload: { complete: true, count: 3 } });
    expect(stream.next()).toBeNull();
  });

  it('property: count equals the frames between begin and end, for any snapshot size', () => {
    fc.assert(
      fc.property(fc.nat({ max: 60 }), fc.boolean(), (nodes, withCluster) => {
        const snap = { ...SNAPSHOT, cluster: withCluster ? SNAPSHOT.cluster : null, nodes: Array.from({ length: nodes }, (_, i) => node(i)) };
        const items = drain(new ObservedResync(snap, newId));
        const end = items.at(-1)!;
        return (end.payload as { count: number }).count === items.length - 2 && (withCluster ? 1 : 0) + nodes + 1 === items.length - 2;
      }),
    );
  });

  it('leaves cluster out of the scope when the snapshot has no cluster object', () => {
    const stream = new ObservedResync({ ...SNAPSHOT, cluster: null }, newId);
    expect(stream.scope).toEqual(['node', 'device', 'deployment']);
  });

  it('an invalid object, or one too big to send, makes the stream incomplete rather than a wrong prune', () => {
    const bad = new ObservedResync({ ...SNAPSHOT, nodes: [{ ...node(1), node_id: 'bad id with spaces' }] }, newId);
    expect(bad.problems).toHaveLength(1);
    expect(drain(bad).at(-1)?.payload).toEqual({ complete: false, count: 2 });

    const skipped = new ObservedResync(SNAPSHOT, newId);
    const items = [];
    for (let item = skipped.next(); item; item = skipped.next()) {
      if (item.type === 'node.observed') skipped.skipped(item, 'too big');
      else if (item.type !== 'resync.begin' && item.type !== 'stream.end') skipped.wrote(item);
      items.push(item);
    }
    expect(items.at(-1)?.payload).toEqual({ complete: false, count: 2 });
  });
});

describe("the hub's resync streams", () => {
  it('matches frames to their stream on reply_to only, and counts a replayed frame once', () => {
    const r = new InboundResyncs();
    r.begin('A', ['deployment']);
    r.begin('B', ['deployment']);
    r.carry('A', 2, 'd1');
    r.carry('B', 3, 'd9');
    r.carry('A', 4, 'd2');
    r.carry('A', 4, 'd2'); // replay after a reconnect
    expect(r.judge('A', { complete: true, count: 2 })).toMatchObject({ prune: true, scope: ['deployment'], keepDeployments: new Set(['d1', 'd2']) });
    expect(r.judge('B', { complete: true, count: 1 })).toMatchObject({ prune: true });
  });

  it('refuses to prune on an incomplete stream, a count mismatch, an unreadable frame or an unknown stream', () => {
    const r = new InboundResyncs();
    r.begin('A', ['deployment']);
    r.carry('A', 2, 'd1');
    expect(r.judge('A', { complete: false, count: 1 })).toMatchObject({ prune: false });
    expect(r.judge('A', { complete: true, count: 2 })).toMatchObject({ prune: false });
    r.unreadable('A', 3);
    expect(r.judge('A', { complete: true, count: 2 })).toMatchObject({ prune: false });
    expect(r.judge('Z', { complete: true, count: 0 })).toMatchObject({ prune: false });
    expect(r.judge(null, { complete: true, count: 0 })).toMatchObject({ prune: false });
  });

  it('keeps from its prune the deployments sent after the begin, not a retry of one numbered before it', () => {
    const r = new InboundResyncs();
    r.begin('A', ['deployment'], 6);
    // Seq 5 (z) failed before the snapshot opened and is retried inside it; y follows the snapshot.
    r.mentioned(null, 'z', 5);
    r.carry('A', 7, 'd1');
    r.mentioned('A', 'd1', 7);
    r.mentioned(null, 'y', 9);
    expect(r.judge('A', { complete: true, count: 1 })).toMatchObject({ prune: true, scope: ['deployment'], keepDeployments: new Set(['d1', 'y']) });
  });

  it('bounds how many streams it keeps open', () => {
    const r = new InboundResyncs(2);
    r.begin('A', ['deployment']);
    r.begin('B', ['deployment']);
    r.begin('C', ['deployment']);
    expect(r.size).toBe(2);
    expect(r.has('A')).toBe(false);
  });
});
