/**
 * A poke carries its changes as they were written. Once a later revision is known to exist (a
 * resync page read after the claim carried it), such a poke may name a deployment older than
 * the one already sent: queued directly it would roll the operator back. The host stands in for
 * the session object, as in desired-pump-seed.test.ts.
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
const dep = (id: string, revision: number, max = 2): Payload<'deployment.desired'> => ({
  deployment_id: id,
  workload_id: 'w',
  revision,
  min_replicas: 1,
  max_replicas: max,
  serving,
  deleted: false,
});
const row = (id: string, revision: number, max = 2) => ({ kind: 'deployment', revision: String(revision), deployment_id: id, workload_id: 'w', min_replicas: 1, max_replicas: max, serving, deleted: false, held: true });

/** Answers are consumed in order; an Error answer is thrown (Postgres unreachable). */
function harness(revision: number, answers: (Record<string, unknown>[] | Error)[]) {
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
  let holding = 0;
  let written = 0;
  const write = () => {
    for (const o of queued.slice(written)) if (o.effect) applyEffect(meta, o.effect);
    written = queued.length;
  };
  const sql: Sql = {
    async query<R>() {
      const rows = answers.shift();
      if (rows === undefined) throw new Error('unexpected query');
      if (rows instanceof Error) throw rows;
      return { rows: rows as R[], rowCount: rows.length };
    },
  };
  const log = createLogger({ component: 'test' });
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
      log: () => log,
    },
    meta,
  );
  pump.learn(revision);
  return { pump, queued };
}

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
