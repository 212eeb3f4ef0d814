/**
 * The desired pump's seed: a fresh session's resync queued from the page its claim read. What it
 * queues, and which fetches it leaves to the pump (and only those). The host stands in for the
 * session object; its Postgres answers are rows shaped as the desired-state queries return them.
 * The same behaviour against real workerd and Postgres: test/hub/claim-snapshot.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { Outgoing } from '../../../src/hub/session/outgoing';
import type { Payload } from '../../../src/protocol';
import { dep, harness, row } from './support/desired-pump-harness';

const settle = () => new Promise((r) => setTimeout(r, 10));
const kinds = (q: Outgoing[]) => q.map((o) => (o.kind === 'frame' ? o.type : `marker:${o.effect.t}`));

describe('a fresh session seeded with its claim page', () => {
  it('a page shorter than the limit and no open operation: the whole resync is queued with no fetch', async () => {
    const { meta, pump, queued, queries, sent } = harness(7);
    pump.seed({ deployments: [dep('a', 3), dep('b', 7)], openOperations: false }, 5);
    await settle();
    expect(queries).toEqual([]);
    expect(kinds(queued)).toEqual(['resync.begin', 'deployment.desired', 'deployment.desired', 'stream.end', 'marker:resync_done']);
    const begin = queued[0] as Extract<Outgoing, { kind: 'frame' }>;
    for (const o of queued.slice(1, 4)) expect(o.kind === 'frame' && o.replyTo).toBe(begin.id);
    expect(sent[3]).toEqual({ complete: true, count: 2 });
    expect(meta.hubResync).toBeNull();
    expect(meta.desiredWatermark).toBe(7);
  });

  it('an empty snapshot still opens and ends the stream', async () => {
    const { pump, queued, queries, sent } = harness(0);
    pump.seed({ deployments: [], openOperations: false }, 5);
    await settle();
    expect(queries).toEqual([]);
    expect(kinds(queued)).toEqual(['resync.begin', 'stream.end', 'marker:resync_done']);
    expect(sent[1]).toEqual({ complete: true, count: 0 });
  });

  it('a full page: the pump fetches the next page after the last seeded deployment, never the seeded ones again', async () => {
    const { pump, queued, queries } = harness(9, [
      // desired_deployments after 'b': one more, then the open operations: none.
      // `held`: the session still holds its claim (db/desired.ts reads only while it does).
      [row('c', 9)],
      [],
    ]);
    pump.seed({ deployments: [dep('a', 1), dep('b', 2)], openOperations: false }, 2);
    await settle();
    // The session's fence (cluster, session, generation, token hash), then the page's cursor.
    expect([queries[0]?.params[0], queries[0]?.params[4]]).toEqual(['c1', 'b']);
    expect(queries).toHaveLength(2);
    const ids = queued.flatMap((o) => (o.kind === 'frame' && o.type === 'deployment.desired' ? [(o.payload() as Payload<'deployment.desired'>).deployment_id] : []));
    expect(ids).toEqual(['a', 'b', 'c']);
    expect(kinds(queued).slice(-2)).toEqual(['stream.end', 'marker:resync_done']);
  });

  it('open operations owed: the stream ends with the page, then the pump fetches the operations', async () => {
    const { pump, queued, queries } = harness(4, [[]]);
    pump.seed({ deployments: [dep('a', 1)], openOperations: true }, 5);
    await settle();
    expect(queries).toHaveLength(1);
    expect(queries[0]?.text).toMatch(/from operations/);
    expect(kinds(queued)).toEqual(['resync.begin', 'deployment.desired', 'stream.end', 'marker:resync_done']);
  });
});

describe('changes after a resync whose pages carried newer revisions than its claim', () => {
  it('a late poke for a revision the snapshot already passed never sends a deployment older than the one sent', async () => {
    // Claimed at revision 5. The next page, read later, carries c at revision 7 (written after the
    // claim); a poke for revision 6 (c as it was then) arrives only after the resync ended.
    const { pump, queued } = harness(5, [
      [row('c', 7)], // the snapshot's next page
      [], // open operations: none
      [row('c', 7)], // changes above 5, as Postgres holds them now
    ]);
    pump.seed({ deployments: [dep('a', 1), dep('b', 2)], openOperations: false }, 2);
    await settle();
    pump.poke(6, [{ kind: 'deployment', revision: 6, payload: dep('c', 6) }]);
    await settle();
    const sentC = queued.flatMap((o) => (o.kind === 'frame' && o.type === 'deployment.desired' ? [o.payload() as Payload<'deployment.desired'>] : [])).filter((p) => p.deployment_id === 'c');
    expect(sentC.length).toBeGreaterThan(0);
    const revisions = sentC.map((p) => p.revision);
    expect(revisions, `c was sent at revisions ${revisions.join(', ')}`).toEqual([...revisions].sort((x, y) => x - y));
  });
});
