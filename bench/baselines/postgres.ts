/**
 * Baseline: Postgres itself. The rows an ingest batch writes, timed three ways so the database's
 * share of hub ingest can be read off:
 *
 * - the hub's own fenced batch statement (src/hub/db/ingest.ts `applyIngestBatch`, built by the
 *   hub's `buildBatch` from the same frames) sent from Node through the same Neon driver and
 *   WebSocket proxy the hub uses;
 * - one minimal set-based upsert of the same device rows (`jsonb_to_recordset` … `on conflict`),
 *   same driver and proxy;
 * - both again "straight": psql over TCP to Postgres, no proxy, no driver (`\timing`).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@neondatabase/serverless';
import { buildFrame, newId, readFrame } from '../../src/protocol';
import { applyIngestBatch, type SessionFence } from '../../src/hub/db/ingest';
import { claimCluster } from '../../src/hub/db/ownership';
import type { Sql } from '../../src/hub/db/sql';
import { buildBatch, type IngestBatch, type InboundItem } from '../../src/hub/session/ingest-batch';
import type { BenchEnv } from '../lib/env';
import { device } from '../lib/payloads';

export function sqlOf(client: Client): Sql {
  return { query: async (text, params) => (await client.query(text, params)) as never };
}

/** A cluster claimed by a made-up session, so the hub's fenced statement really writes. */
export async function claimedFence(env: BenchEnv, client: Client): Promise<SessionFence> {
  const [c] = await env.createClusters(1, 'pgbase');
  if (!c?.tokenHash) throw new Error('cluster not created');
  const sessionId = `${newId()}.${newId()}`;
  const claim = await claimCluster(sqlOf(client), {
    clusterUid: c.uid,
    tokenHashHex: c.tokenHash,
    resume: null,
    freshSessionId: sessionId,
    live: {},
    remoteAddr: null,
    operatorVersion: 'bench',
    contention: { windowMs: 600_000, threshold: 3, quietMs: 600_000 },
    pollShard: 0,
    watermark: 0,
    ingestCommits: 0,
  }, null);
  if (claim.generation === null) throw new Error(`claim refused: ${claim.refusal}`);
  return { clusterUid: c.uid, sessionId, generation: claim.generation, tokenHash: c.tokenHash };
}

/** The batch the hub builds from `n` device.observed frames (seqs from `seq0`). */
export function deviceBatch(n: number, subjectOffset: number, seq0: number): IngestBatch {
  const items: InboundItem[] = [];
  for (let i = 0; i < n; i++) {
    const seq = seq0 + i;
    const text = buildFrame({ type: 'device.observed', payload: device(subjectOffset + i), seq, id: newId() });
    const f = readFrame(text);
    if (f.kind !== 'message') throw new Error('bad frame');
    items.push({ seq, id: f.envelope.id, replyTo: null, type: f.envelope.type, arrivedAt: Date.now(), kind: 'message', message: f.message });
  }
  return buildBatch(items, {}).batch;
}

/** The statement text and parameters `applyIngestBatch` sends, without sending them. */
export async function captureHubStatement(fence: SessionFence, batch: IngestBatch): Promise<{ text: string; params: unknown[] }> {
  let captured: { text: string; params: unknown[] } | null = null;
  await applyIngestBatch(
    {
      query: async (text, params) => {
        captured = { text, params: params ?? [] };
        return { rows: [{ fenced: true, pruned: 0 }] as never[], rowCount: 1 };
      },
    },
    fence,
    batch,
  );
  if (!captured) throw new Error('nothing captured');
  return captured;
}

export const MINIMAL_UPSERT = `insert into devices (cluster_uid, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq, updated_at)
select $1, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, $2, seq, now()
from jsonb_to_recordset($3::jsonb) as x(device_id text, node_id text, vendor text, model text, memory_total_mb bigint, health text, driver_version text, seq bigint)
on conflict (cluster_uid, device_id) do update set node_id = excluded.node_id, vendor = excluded.vendor, model = excluded.model,
  memory_total_mb = excluded.memory_total_mb, health = excluded.health, driver_version = excluded.driver_version,
  obs_session = excluded.obs_session, obs_seq = excluded.obs_seq, updated_at = now()`;

export function minimalParams(fence: SessionFence, batch: IngestBatch): unknown[] {
  return [fence.clusterUid, fence.sessionId, JSON.stringify(batch.devices)];
}

/**
 * ms per execution of a statement through the Neon driver + proxy. Unnamed (as the hub sends
 * it: parsed, analysed and planned on every execution) unless `name` is given, which makes it a
 * prepared statement parsed once per connection (pg's `{ name, text, values }`).
 */
export async function timeViaDriver(client: Client, text: string, params: unknown[], reps: number, name?: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    if (name) await client.query({ name, text, values: params });
    else await client.query(text, params);
    out.push(performance.now() - t0);
  }
  return out;
}

function literal(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  return `'${String(v).replace(/'/g, "''")}'`;
}

/**
 * ms per execution "straight": psql over TCP to the same server and database, no proxy, no
 * driver; PREPARE once, EXECUTE `reps` times, `\timing` per statement.
 */
export async function timeViaPsql(databaseUrl: string, text: string, params: unknown[], reps: number): Promise<number[] | null> {
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-psql-'));
  try {
    const file = path.join(dir, 'q.sql');
    const exec = `execute bench_stmt(${params.map(literal).join(', ')});\n`;
    await writeFile(file, `prepare bench_stmt as ${text};\n\\timing on\n${exec.repeat(reps)}`);
    const url = new URL(databaseUrl);
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        'psql',
        ['-X', '-q', '-h', url.hostname || '127.0.0.1', '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres'), '-d', url.pathname.slice(1), '-f', file],
        { env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password) }, maxBuffer: 64 << 20 },
        (err, stdout) => (err ? reject(err) : resolve(stdout)),
      );
    });
    const times = [...out.matchAll(/^Time: ([\d.]+) ms/gm)].map((m) => Number(m[1]));
    return times.length ? times : null;
  } catch {
    return null; // no psql on this machine, or embedded PGlite
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** pgbench -C (a new connection per transaction) straight to the server: its average connection time. */
export async function pgbenchConnect(databaseUrl: string, seconds: number): Promise<{ connectMs: number } | null> {
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-pgbench-'));
  try {
    const file = path.join(dir, 'select1.sql');
    await writeFile(file, 'select 1;\n');
    const url = new URL(databaseUrl);
    const bin = ['pgbench', '/usr/lib/postgresql/15/bin/pgbench', '/usr/lib/postgresql/16/bin/pgbench', '/usr/lib/postgresql/17/bin/pgbench'];
    for (const b of bin) {
      const out = await new Promise<string | null>((resolve) => {
        execFile(
          b,
          ['-n', '-C', '-T', String(seconds), '-f', file, '-h', url.hostname || '127.0.0.1', '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres'), url.pathname.slice(1)],
          { env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password) } },
          (err, stdout) => resolve(err ? null : stdout),
        );
      });
      const m = out ? /average connection time = ([\d.]+) ms/.exec(out) : null;
      if (m) return { connectMs: Number(m[1]) };
    }
    return null;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function runPsql(databaseUrl: string, script: string): Promise<string | null> {
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-psql-'));
  try {
    const file = path.join(dir, 'q.sql');
    await writeFile(file, script);
    const url = new URL(databaseUrl);
    return await new Promise<string | null>((resolve) => {
      execFile(
        'psql',
        ['-X', '-q', '-h', url.hostname || '127.0.0.1', '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres'), '-d', url.pathname.slice(1), '-f', file],
        { env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password) }, maxBuffer: 64 << 20 },
        (err, stdout) => resolve(err ? null : stdout),
      );
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Planning time of a statement when its parameters are known at planning (as for the unnamed
 * statements the Neon driver sends: a custom plan every time): EXPLAIN (SUMMARY) of EXECUTE with
 * plan_cache_mode = force_custom_plan, `reps` times; ms each.
 */
export async function planningMs(databaseUrl: string, text: string, params: unknown[], reps: number): Promise<number[] | null> {
  const exec = `explain (summary on) execute bench_stmt(${params.map(literal).join(', ')});\n`;
  const out = await runPsql(databaseUrl, `set plan_cache_mode = force_custom_plan;\nprepare bench_stmt as ${text};\n${exec.repeat(reps)}`);
  if (!out) return null;
  const t = [...out.matchAll(/Planning Time: ([\d.]+) ms/g)].map((m) => Number(m[1]));
  return t.length ? t : null;
}

/**
 * HOT experiment: the minimal device upsert of the same rows, repeated (steady-state
 * re-reports), against two fresh copies of the devices table: fillfactor 100 (Postgres's
 * default) and fillfactor 70 (as migrated since 0007: room on each page for heap-only-tuple
 * updates). ms per execution after warm-up.
 */
export async function fillfactorExperiment(
  databaseUrl: string,
  params: unknown[],
  reps: number,
): Promise<{ ff100: number[]; ff70: number[] } | null> {
  const stmt = (table: string) => MINIMAL_UPSERT.replace('insert into devices', `insert into ${table}`);
  const exec = (name: string) => `execute ${name}(${params.map(literal).join(', ')});\n`;
  let script = `drop table if exists bench_devices_ff100, bench_devices_ff70;
create table bench_devices_ff100 (like devices including all);
create table bench_devices_ff70 (like devices including all) with (fillfactor = 70);
prepare ff100 as ${stmt('bench_devices_ff100')};
prepare ff70 as ${stmt('bench_devices_ff70')};
${exec('ff100')}${exec('ff70')}${exec('ff100')}${exec('ff70')}
\\timing on
`;
  for (let i = 0; i < reps; i++) script += `${exec('ff100')}${exec('ff70')}`;
  script += '\\timing off\ndrop table bench_devices_ff100, bench_devices_ff70;\n';
  const out = await runPsql(databaseUrl, script);
  if (!out) return null;
  const t = [...out.matchAll(/^Time: ([\d.]+) ms/gm)].map((m) => Number(m[1]));
  if (t.length < 2 * reps) return null;
  return { ff100: t.filter((_, i) => i % 2 === 0), ff70: t.filter((_, i) => i % 2 === 1) };
}
