/// <reference types="vite/client" />
/**
 * A batch of observed rows only (nodes, devices, deployments, events) is written by a lean
 * statement carrying just those tables' writes (src/hub/db/ingest.ts `ingestStatement`). It must
 * leave exactly what the full statement leaves: the same batches, built from the fixtures' frames
 * by the hub's own batch builder, applied to two clusters (full to one, lean to the other) on
 * real Postgres, give the same rows, and a stale fence writes nothing in both.
 */
import { describe, expect, it } from 'vitest';
import { applyIngestBatch, INGEST_SQL, ingestParams, ingestStatement, leanSections, type SessionFence } from '../../src/hub/db/ingest';
import { claimCluster } from '../../src/hub/db/ownership';
import { buildBatch, type InboundItem, type IngestBatch } from '../../src/hub/session/ingest-batch';
import { Pg } from '../../src/hub/pg';
import { decodePayload, newId, type MessageType, type TypedMessage } from '../../src/protocol';
import { hubEnv, newCluster, sql } from './support/peer';
import { claimArgs } from '../support/claim-args';

// Bundled at build time: workerd has no file system.
const fixtures = import.meta.glob<{ default: { payload: Record<string, unknown> } }>('../../fixtures/*.json', { eager: true });
function payload(type: MessageType, over: Record<string, unknown>): unknown {
  const f = fixtures[`../../fixtures/${type}.json`];
  if (!f) throw new Error(`no fixture for ${type}`);
  return { ...structuredClone(f.default.payload), ...over };
}

/** A small deterministic generator: the same rounds every run, varied within each. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1_664_525 + 1_013_904_223) >>> 0;
    return s / 2 ** 32;
  };
}

type RowType = 'node.observed' | 'device.observed' | 'deployment.observed' | 'node.event' | 'device.event' | 'deployment.event';

function frame(type: RowType, n: number, r: () => number): unknown {
  const pick = <T,>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)] as T;
  switch (type) {
    case 'node.observed':
      return payload(type, { node_id: `node-${n % 4}`, name: `node-${n % 4}`, ready: r() < 0.8, labels: { pool: pick(['a', 'b']) } });
    case 'device.observed':
      return payload(type, { device_id: `GPU-${n % 12}`, node_id: `node-${n % 4}`, health: pick(['healthy', 'unhealthy']), memory_total_mb: pick([40_960, 81_920]) });
    case 'deployment.observed': {
      const id = `dep-${n % 3}`;
      const replicas = [...new Set(Array.from({ length: Math.floor(r() * 4) }, (_, i) => `${id}-r${Math.floor(r() * 6) + i}`))];
      return payload(type, { deployment_id: id, observed_revision: Math.floor(r() * 20), ready_replicas: replicas.length, replica_ids: replicas });
    }
    default:
      return payload(type, { subject: `s-${n % 5}`, reason: pick(['A', 'B']), occurred_at: new Date(1_790_000_000_000 + n * 1_000).toISOString() });
  }
}

function items(types: readonly RowType[], count: number, seq0: number, r: () => number): InboundItem[] {
  return Array.from({ length: count }, (_, i) => {
    const type = types[Math.floor(r() * types.length)] as RowType;
    const d = decodePayload(type, frame(type, Math.floor(r() * 1_000), r));
    if (!d.ok) throw new Error(`fixture-built ${type} did not decode: ${JSON.stringify(d)}`);
    return { seq: seq0 + i, id: newId(), replyTo: null, type, arrivedAt: 0, kind: 'message', message: d.message as TypedMessage };
  });
}

async function claimed(pg: Pg): Promise<SessionFence> {
  const c = await newCluster('lean');
  const [row] = await sql<{ h: string }>(`select encode(token_hash, 'hex') as h from clusters where uid = $1`, [c.uid]);
  const sessionId = `${newId()}.${newId()}`;
  const claim = await claimCluster(pg, claimArgs(c.uid, row!.h, { freshSessionId: sessionId }), null);
  if (claim.generation === null) throw new Error(`claim refused: ${claim.refusal}`);
  return { clusterUid: c.uid, sessionId, generation: claim.generation, tokenHash: row!.h };
}

/** What the batches left for a cluster, every column but the cluster's and session's ids and the clock. */
async function observed(uid: string): Promise<Record<string, unknown[]>> {
  const q = (text: string) => sql(text, [uid]);
  return {
    nodes: await q('select node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_seq from nodes where cluster_uid = $1 order by node_id'),
    devices: await q('select device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_seq from devices where cluster_uid = $1 order by device_id'),
    deployments: await q('select deployment_id, observed_revision, phase, ready_replicas, message, obs_seq from observed_deployments where cluster_uid = $1 order by deployment_id'),
    replicas: await q('select deployment_id, replica_id from replicas where cluster_uid = $1 order by 1, 2'),
    events: await q('select frame_id, kind, subject, reason, message, severity, occurred_at, seq from events where cluster_uid = $1 order by frame_id'),
  };
}

const fullStatement = (pg: Pg, fence: SessionFence, b: IngestBatch) => pg.query<{ fenced: boolean; pruned: string; unknown_ops: unknown[] }>(INGEST_SQL, ingestParams(fence, b), 'test_ingest_full');

describe('the lean ingest statement', () => {
  it('takes only batches of rows: anything else (a delete, link counters, a prune…) takes the full statement', () => {
    const r = rng(7);
    const rows = buildBatch(items(['device.observed', 'node.event'], 20, 1, r), {}).batch;
    expect(leanSections(rows)?.map((s) => s.key)).toEqual(['devices', 'events']);
    const lean = ingestStatement({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }, rows);
    expect(lean.params).toHaveLength(7);
    expect(lean.name).toBe('wingsmith_ingest_rows_v3_de');
    // Postgres keeps 63 bytes of a statement's name; the connection appends `_` and its tag (under 16).
    const all = buildBatch(items(['node.observed', 'device.observed', 'deployment.observed', 'node.event'], 60, 1, r), {}).batch;
    const longest = ingestStatement({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }, all).name;
    expect(longest).toBe('wingsmith_ingest_rows_v3_ndpe');
    expect(longest.length + 1 + 16).toBeLessThanOrEqual(63);
    const removed = decodePayload('device.removed', payload('device.removed', {}));
    if (!removed.ok) throw new Error('device.removed fixture did not decode');
    const withDelete = buildBatch([...items(['device.observed'], 3, 1, r), { seq: 4, id: newId(), replyTo: null, type: 'device.removed', arrivedAt: 0, kind: 'message', message: removed.message as TypedMessage }], {}).batch;
    expect(leanSections(withDelete)).toBeNull();
    expect(ingestStatement({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }, withDelete).text).toBe(INGEST_SQL);
  });

  it('leaves exactly the rows the full statement leaves, round after round of mixed row frames', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 0 });
    try {
      const full = await claimed(pg);
      const lean = await claimed(pg);
      const r = rng(0x1ea7);
      const mixes: RowType[][] = [
        ['device.observed'],
        ['node.observed', 'device.observed'],
        ['deployment.observed'],
        ['node.event', 'device.event', 'deployment.event'],
        ['node.observed', 'device.observed', 'deployment.observed', 'node.event', 'device.event', 'deployment.event'],
      ];
      let seq = 1;
      const shapes = new Set<string>();
      // Two rounds of each mix: every shape, each against rows the rounds before it left.
      for (let round = 0; round < 10; round++) {
        const mix = mixes[round % mixes.length] as RowType[];
        const batch = buildBatch(items(mix, 5 + Math.floor(r() * 40), seq, r), {}).batch;
        seq += 100;
        const sections = leanSections(batch);
        expect(sections, `round ${round}: a batch of rows takes the lean statement`).not.toBeNull();
        shapes.add(sections!.map((s) => s.key).join('+'));
        const a = await fullStatement(pg, full, batch);
        const b = await applyIngestBatch(pg, lean, batch);
        expect(a.rows[0]).toMatchObject({ fenced: true, unknown_ops: [] });
        expect(Number(a.rows[0]?.pruned)).toBe(0);
        expect(b).toEqual({ fenced: true, pruned: 0, unknownOperations: [], commits: round + 1 });
        expect(await observed(lean.clusterUid), `round ${round}`).toEqual(await observed(full.clusterUid));
      }
      expect(shapes.size).toBeGreaterThanOrEqual(4);
      // Something was written at all, in every table.
      const left = await observed(lean.clusterUid);
      for (const [table, rows] of Object.entries(left)) expect(rows.length, table).toBeGreaterThan(0);
    } finally {
      await pg.close();
    }
  });

  it('writes nothing under a stale fence, as the full statement does', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 0 });
    try {
      const fence = await claimed(pg);
      const stale = { ...fence, generation: fence.generation + 1 };
      const batch = buildBatch(items(['node.observed', 'device.observed', 'deployment.observed', 'device.event'], 30, 1, rng(3)), {}).batch;
      expect(leanSections(batch)).not.toBeNull();
      expect(await applyIngestBatch(pg, stale, batch)).toEqual({ fenced: false, pruned: 0, unknownOperations: [] });
      expect((await fullStatement(pg, stale, batch)).rows[0]?.fenced).toBe(false);
      expect(Object.values(await observed(fence.clusterUid)).flat()).toEqual([]);
    } finally {
      await pg.close();
    }
  });

  // Migration 0027: how many of the session's ingest statements the database holds, for the restore check.
  it('counts each committed statement on the owner row, and writes nothing once the owner row counts fewer than the session did, as the full statement does', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 0 });
    const counted = async (uid: string) => Number((await sql<{ n: string }>('select ingest_commits as n from cluster_owners where cluster_uid = $1', [uid]))[0]?.n);
    try {
      for (const statement of ['lean', 'full'] as const) {
        const fence = await claimed(pg);
        const run = (f: SessionFence, b: IngestBatch) =>
          statement === 'lean'
            ? applyIngestBatch(pg, f, b)
            : fullStatement(pg, f, b).then((r) => {
                const row = r.rows[0] as { fenced?: boolean; went_back?: boolean; commits?: string | null } | undefined;
                return { fenced: row?.fenced, ...(row?.went_back ? { wentBack: true } : {}), ...(row?.commits != null ? { commits: Number(row.commits) } : {}) };
              });
        expect(await counted(fence.clusterUid)).toBe(0);
        expect(await run(fence, buildBatch(items(['device.observed'], 10, 11, rng(5)), {}).batch)).toMatchObject({ fenced: true, commits: 1 });
        // Frames below the last ones (a frame held behind a hole, applied late) count as a statement too.
        expect(await run({ ...fence, ingestCommits: 1 }, buildBatch(items(['device.observed'], 2, 3, rng(6)), {}).batch)).toMatchObject({ fenced: true, commits: 2 });
        expect(await counted(fence.clusterUid), statement).toBe(2);

        // Restored from a backup taken after the first statement: the session counted 2.
        await sql('update cluster_owners set ingest_commits = 1 where cluster_uid = $1', [fence.clusterUid]);
        const before = await observed(fence.clusterUid);
        const next = buildBatch(items(['device.observed', 'node.event'], 10, 21, rng(7)), {}).batch;
        expect(await run({ ...fence, ingestCommits: 2 }, next), statement).toEqual({ fenced: false, wentBack: true, ...(statement === 'lean' ? { pruned: 0, unknownOperations: [] } : {}) });
        expect(await counted(fence.clusterUid)).toBe(1);
        expect(await observed(fence.clusterUid)).toEqual(before);
        // A session that counted no more than the database holds goes on.
        expect(await run({ ...fence, ingestCommits: 1 }, next)).toMatchObject({ fenced: true, commits: 2 });
        expect(await counted(fence.clusterUid)).toBe(2);
      }
    } finally {
      await pg.close();
    }
  });
});
