/**
 * The ingest statement itself, three ways, on a real Postgres through the hub's driver and proxy:
 *
 * - before: every table an array of objects read by `jsonb_to_recordset`, one parameter each;
 * - one document: the same objects in a single JSON parameter, each table `$5::jsonb->'devices'`…;
 * - after: the hub's statement (`INGEST_SQL`, `ingestParams`): row tables as positional rows.
 *
 * "Before" and "one document" are rewritten from the hub's own statement text (only the row
 * tables' CTEs differ), so the rest of the statement is the same in all three.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@neondatabase/serverless';
import { ulid } from 'ulid';
import { LOCAL_TEST_DATABASE_URL, startDevStack } from '../../scripts/lib/dev-stack';
import { pgClient } from '../../scripts/lib/pg-node';
import { INGEST_SQL, ingestParams, type SessionFence } from '../../src/hub/db/ingest';
import { claimCluster } from '../../src/hub/db/ownership';
import { buildBatch, type IngestBatch } from '../../src/hub/session/ingest-batch';
import { newId } from '../../src/protocol';
import { sqlOf } from '../baselines/postgres';
import { deviceItems, paramsBefore } from './cases';

/** The row tables' CTEs as they were, reading objects. */
const OBJECT_CTES: Record<string, string> = {
  n_in: `select node_id, name, ready, schedulable, labels, taints, (allocatable->>'gpus')::int as gpus,
    (allocatable->>'cpu_millis')::bigint as cpu_millis, (allocatable->>'memory_mb')::bigint as memory_mb, seq
  from jsonb_to_recordset($6::jsonb)
    as x(node_id text, name text, ready boolean, schedulable boolean, labels jsonb, taints jsonb, allocatable jsonb, seq bigint)`,
  dv_in: `select * from jsonb_to_recordset($8::jsonb)
    as x(device_id text, node_id text, vendor text, model text, memory_total_mb bigint, health text, driver_version text, seq bigint)`,
  dp_in: `select * from jsonb_to_recordset($10::jsonb)
    as x(deployment_id text, observed_revision bigint, phase text, ready_replicas int, replica_ids jsonb, message text, seq bigint)`,
  ev_in: `select * from jsonb_to_recordset($12::jsonb)
    as x(frame_id text, kind text, subject text, reason text, message text, severity text, occurred_at timestamptz, seq bigint)`,
};

function beforeSql(): string {
  let text = INGEST_SQL;
  for (const [cte, body] of Object.entries(OBJECT_CTES)) {
    const re = new RegExp(`\\n${cte} as \\(select [^\\n]*jsonb_array_elements\\(\\$\\d+::jsonb\\) r\\),`);
    if (!re.test(text)) throw new Error(`the hub's statement has no positional ${cte}: update bench/micro/statement.ts`);
    text = text.replace(re, `\n${cte} as (\n  ${body}\n),`);
  }
  return text;
}

const TABLES = ['cluster', 'nodes', 'nodeDeletes', 'devices', 'deviceDeletes', 'deployments', 'deploymentDeletes', 'events', 'linkStats', 'operationUpdates', 'operationEvents', 'rejections', 'prunes', 'desiredRefusals'];

function oneDocumentSql(before: string): string {
  let text = before;
  // `$5` first: the text put in for the others holds `$5::jsonb` itself. (`$6::jsonb` is never part of `$16::jsonb`.)
  for (let i = 0; i < TABLES.length; i++) text = text.split(`$${i + 5}::jsonb`).join(`($5::jsonb->'${TABLES[i]}')`);
  if (/\$(?:[6-9]|1\d)::jsonb/.test(text)) throw new Error('one-document rewrite left a table parameter behind');
  return text;
}

function oneDocumentParams(fence: SessionFence, b: IngestBatch): unknown[] {
  const p = paramsBefore(fence, b);
  return [...p.slice(0, 4), `{${TABLES.map((t, i) => `"${t}":${p[i + 4] as string}`).join(',')}}`];
}

/** A cluster of its own on the micro database, claimed by a made-up session: the fence its statements carry. */
export async function microCluster(client: Client): Promise<SessionFence> {
  const uid = ulid();
  const tokenHash = randomBytes(32).toString('hex');
  await client.query(`insert into clusters (uid, name, token_hash, token_issued_at) values ($1, $2, decode($3, 'hex'), now())`, [uid, `micro-${uid}`, tokenHash]);
  const sessionId = `${newId()}.${newId()}`;
  const claim = await claimCluster(sqlOf(client), {
    clusterUid: uid,
    tokenHashHex: tokenHash,
    resume: null,
    freshSessionId: sessionId,
    live: {},
    remoteAddr: null,
    operatorVersion: 'micro',
    contention: { windowMs: 600_000, threshold: 3, quietMs: 600_000 },
    pollShard: 0,
    watermark: 0,
    ingestCommits: 0,
  }, null);
  if (claim.generation === null) throw new Error(`claim refused: ${claim.refusal}`);
  return { clusterUid: uid, sessionId, generation: claim.generation, tokenHash };
}

export interface StatementResult {
  variant: string;
  ms: number[];
  /** Median ms per statement. */
  median: number;
}

/** ms per 2,000-device statement for each variant, `reps` each, round-robin, after a warm-up. */
export async function statementSuite(reps: number, databaseUrl = process.env.DATABASE_URL ?? LOCAL_TEST_DATABASE_URL): Promise<{ results: StatementResult[]; server: string }> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-micro-'));
  const stack = await startDevStack({ databaseUrl, dataDir, createDatabase: `wingsmith_micro_${randomBytes(5).toString('hex')}`, reapStaleDatabases: 'wingsmith_micro_' });
  const client = pgClient(stack.databaseUrl, stack.pgWsProxy);
  await client.connect();
  try {
    const server = ((await client.query<{ v: string }>('select version() as v')).rows[0]?.v ?? '').split(' on ')[0] ?? '';
    const fence = await microCluster(client);
    const uid = fence.clusterUid;
    // 10,000 GPUs in batches of 2,000, rows already there: steady-state re-reports, as the ingest benchmark sends.
    const items = deviceItems(10_000, 'fast');
    const batches = Array.from({ length: 5 }, (_, k) => buildBatch(items.slice(k * 2_000, (k + 1) * 2_000), {}).batch);
    const before = beforeSql();
    const variants: { variant: string; name: string; text: string; params: (b: IngestBatch) => unknown[] }[] = [
      { variant: 'before: objects, one parameter per table (jsonb_to_recordset)', name: 'micro_before', text: before, params: (b) => paramsBefore(fence, b) },
      { variant: "one document: one parameter, $5::jsonb->'devices'…", name: 'micro_doc', text: oneDocumentSql(before), params: (b) => oneDocumentParams(fence, b) },
      { variant: 'after: positional rows, one parameter per table (the hub now)', name: 'micro_after', text: INGEST_SQL, params: (b) => ingestParams(fence, b) },
    ];
    const run = async (v: (typeof variants)[number], b: IngestBatch): Promise<number> => {
      const values = v.params(b);
      const t0 = performance.now();
      const r = await client.query<{ fenced: boolean }>({ name: v.name, text: v.text, values });
      const dt = performance.now() - t0;
      if (r.rows[0]?.fenced !== true) throw new Error(`${v.variant}: fenced off`);
      return dt;
    };
    for (const b of batches) await run(variants[0]!, b);
    // Each variant really writes: a batch with seqs of its own lands in every row.
    for (const [i, v] of variants.entries()) {
      const seq0 = 1_000_000 * (i + 1);
      await run(v, buildBatch(deviceItems(2_000, 'fast').map((it) => ({ ...it, seq: it.seq + seq0 })), {}).batch);
      const { rows } = await client.query<{ n: string }>('select count(*) as n from devices where cluster_uid = $1 and obs_seq > $2 and obs_seq <= $3', [uid, seq0, seq0 + 2_000]);
      if (Number(rows[0]?.n) !== 2_000) throw new Error(`${v.variant}: wrote ${rows[0]?.n} of 2,000 rows`);
    }
    // Past the driver's first five custom plans, so each variant runs on the plan it keeps.
    for (const v of variants) for (let i = 0; i < 6; i++) await run(v, batches[i % batches.length]!);
    const ms = new Map<string, number[]>(variants.map((v) => [v.variant, []]));
    let k = 0;
    for (let r = 0; r < reps; r++) for (const v of variants) ms.get(v.variant)!.push(await run(v, batches[k++ % batches.length]!));
    const { rows } = await client.query<{ n: string }>('select count(*) as n from devices where cluster_uid = $1', [uid]);
    if (Number(rows[0]?.n) !== 10_000) throw new Error(`expected 10,000 device rows, found ${rows[0]?.n}`);
    return {
      server,
      results: variants.map((v) => {
        const xs = ms.get(v.variant)!;
        return { variant: v.variant, ms: xs, median: [...xs].sort((a, b) => a - b)[xs.length >> 1]! };
      }),
    };
  } finally {
    await client.end().catch(() => undefined);
    await stack.dropDatabase?.();
    await stack.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
