/**
 * The desired pump's seed: a fresh session's resync queued from the page its claim read. What it
 * queues, and which fetches it leaves to the pump (and only those). The host stands in for the
 * session object; its Postgres answers are rows shaped as the desired-state queries return them.
 * The same behaviour against real workerd and Postgres: test/hub/claim-snapshot.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { hubConfig } from '../../../src/hub/config';
import type { Sql } from '../../../src/hub/db/sql';
import { createLogger } from '../../../src/hub/log';
import { DesiredPump } from '../../../src/hub/session/desired-pump';
import { freshSessionMeta } from '../../../src/hub/session/handshake';
import type { Outgoing } from '../../../src/hub/session/outgoing';
import { applyEffect } from '../../../src/hub/session/send-path';
import { MemoryReplayStore, newId, OutboundSequencer, type Payload } from '../../../src/protocol';

const cfg = hubConfig({});
const serving = { engine: 'vllm', model: 'm', image: 'img:1', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 };
const dep = (id: string, revision: number): Payload<'deployment.desired'> => ({
  deployment_id: id,
  workload_id: 'w',
  revision,
  min_replicas: 1,
  max_replicas: 2,
  serving,
  deleted: false,
});

/** A session just opened fresh at desired revision `revision`, whose sent frames apply their effects as the send path does. */
function harness(revision: number, answers: Record<string, unknown>[][] = []) {
  const meta = freshSessionMeta({
    sessionId: `${newId()}.${newId()}`,
    cluster: { uid: 'c1', name: 'c1' },
    tokenHash: '00',
    routeKey: newId(),
    generation: 1,
    desiredRevision: revision,
    out: new OutboundSequencer(new MemoryReplayStore(), { frames: 100, bytes: 1 << 20 }).snapshot(),
    now: Date.now(),
  });
  const queued: Outgoing[] = [];
  /** Each frame's payload as the send path reads it: when it is written, in queue order. */
  const sent: unknown[] = [];
  const queries: { text: string; params: unknown[] }[] = [];
  let holding = 0;
  let written = 0;
  const write = () => {
    for (const o of queued.slice(written)) {
      sent.push(o.kind === 'frame' ? o.payload() : null);
      if (o.effect) applyEffect(meta, o.effect);
    }
    written = queued.length;
  };
  const sql: Sql = {
    async query<R>(text: string, params: unknown[] = []) {
      queries.push({ text, params });
      const rows = answers.shift();
      if (!rows) throw new Error(`unexpected query: ${text.slice(0, 80)}`);
      return { rows: rows as R[], rowCount: rows.length };
    },
  };
  const pump = new DesiredPump(
    {
      cfg,
      sql,
      meta: () => meta,
      connected: () => true,
      queued: () => 0,
      queuedBytes: () => 0,
      claimLost: () => undefined,
      enqueue: (o) => {
        queued.push(o);
        // Written at once, as the send path does when the operator's window is open; inside a
        // batch, at its end.
        if (holding === 0) write();
        return true;
      },
      batch: (queue) => {
        holding++;
        try {
          return queue();
        } finally {
          if (--holding === 0) write();
        }
      },
      fence: () => ({ clusterUid: 'c1', sessionId: meta.sessionId, generation: 1, tokenHash: '00' }),
      log: () => createLogger({ component: 'test' }),
    },
    meta,
  );
  pump.learn(revision);
  return { meta, pump, queued, queries, sent };
}

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
      [{ kind: 'deployment', revision: '9', deployment_id: 'c', workload_id: 'w', min_replicas: 1, max_replicas: 2, serving, deleted: false, held: true }],
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
    const row = (id: string, revision: number) => ({ kind: 'deployment', revision: String(revision), deployment_id: id, workload_id: 'w', min_replicas: 1, max_replicas: 2, serving, deleted: false, held: true });
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
