/**
 * A poke carries its changes as they were written. Once a later revision is known to exist (a
 * resync page read after the claim carried it), such a poke may name a deployment older than
 * the one already sent: queued directly it would roll the operator back. The host stands in for
 * the session object, as in desired-pump-seed.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { Outgoing } from '../../../src/hub/session/outgoing';
import type { Payload } from '../../../src/protocol';
import { dep, harness, row } from './support/desired-pump-harness';

const settle = () => new Promise((r) => setTimeout(r, 10));
const sentOf = (queued: Outgoing[], id: string) =>
  queued.flatMap((o) => (o.kind === 'frame' && o.type === 'deployment.desired' ? [o.payload() as Payload<'deployment.desired'>] : [])).filter((p) => p.deployment_id === id);

describe('a poke older than a revision already known', () => {
  it('after a resync whose page carried a newer revision and whose catch-up read failed, a late poke for an older revision is not queued behind the newer one', async () => {
    // Claimed at revision 5; the next snapshot page carries c at revision 7 (max 9). The read of
    // the changes above 5 fails (Postgres away for a moment); then the poke for revision 6 (c as
    // it was then, max 3) arrives.
    const { pump, queued } = harness(5, [[row('c', 7, 9)], [], new Error('connection terminated')]);
    pump.seed({ deployments: [dep('a', 1), dep('b', 2)], openOperations: false }, 2);
    await settle();
    pump.poke(6, [{ kind: 'deployment', revision: 6, payload: dep('c', 6, 3) }]);
    await settle();
    const revisions = sentOf(queued, 'c').map((p) => p.revision);
    expect(revisions[0]).toBe(7);
    expect(revisions, `c was queued at revisions ${revisions.join(', ')}`).toEqual([...revisions].sort((x, y) => x - y));
  });

  it('after an eviction between a resync page that carried a newer revision and the end of the resync, a late poke for an older revision is not queued behind the newer one', async () => {
    // Claimed at revision 5; the second snapshot page carries c at revision 7 (max 9). The read
    // of the open operations fails, and the object is evicted before it is retried: the rebuilt
    // one ends the resync from its stored record. Then the poke for revision 6 (c as it was then,
    // max 3) arrives, late.
    const { pump, queued, evict } = harness(5, [[row('c', 7, 9)], new Error('connection terminated'), [], [row('c', 7, 9)]]);
    pump.seed({ deployments: [dep('a', 1), dep('b', 2)], openOperations: false }, 2);
    await settle();
    const rebuilt = evict();
    void rebuilt.run();
    await settle();
    rebuilt.poke(6, [{ kind: 'deployment', revision: 6, payload: dep('c', 6, 3) }]);
    await settle();
    const sent = sentOf(queued, 'c').map((p) => [p.revision, p.max_replicas]);
    expect(sent[0]).toEqual([7, 9]);
    expect(sent.at(-1), `c was queued as ${JSON.stringify(sent)}`).toEqual([7, 9]);
    expect(sent.map(([r]) => r)).toEqual(sent.map(([r]) => r).sort((x, y) => (x ?? 0) - (y ?? 0)));
  });

  it('a poke whose changes follow on and are the newest known is still queued without a read', async () => {
    const { pump, queued } = harness(5, []);
    pump.seed({ deployments: [dep('a', 1)], openOperations: false }, 5);
    await settle();
    pump.poke(6, [{ kind: 'deployment', revision: 6, payload: dep('a', 6, 4) }]);
    await settle();
    expect(sentOf(queued, 'a').map((p) => [p.revision, p.max_replicas])).toEqual([
      [1, 2],
      [6, 4],
    ]);
  });
});
