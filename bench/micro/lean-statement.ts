/**
 * The ingest statement for a batch of device rows, full against lean (src/hub/db/ingest.ts
 * `ingestStatement`), on a real Postgres through the hub's driver and proxy, at 100, 400 and
 * 2,000 rows: wall time per statement and the backend's CPU per statement (its schedstat, in ns).
 *
 *   npx tsx bench/micro/lean-statement.ts [--reps 200]
 *
 * Each variant is prepared (named, as the hub sends it) and warmed past Postgres's first five
 * custom plans; the variants alternate statement by statement on one connection, over the same
 * 10,000 existing GPU rows (steady-state re-reports, as the ingest benchmark sends).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { LOCAL_TEST_DATABASE_URL, startDevStack } from '../../scripts/lib/dev-stack';
import { pgClient } from '../../scripts/lib/pg-node';
import { INGEST_SQL, ingestParams, ingestStatement } from '../../src/hub/db/ingest';
import { buildBatch, type IngestBatch } from '../../src/hub/session/ingest-batch';
import { deviceItems } from './cases';
import { microCluster } from './statement';

const { values: args } = parseArgs({ options: { reps: { type: 'string', default: '200' } } });
const reps = Number(args.reps);

async function main(): Promise<void> {
  const databaseUrl = process.env.DATABASE_URL ?? LOCAL_TEST_DATABASE_URL;
  const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-micro-'));
  const stack = await startDevStack({ databaseUrl, dataDir, createDatabase: `wingsmith_micro_${randomBytes(5).toString('hex')}`, reapStaleDatabases: 'wingsmith_micro_' });
  const client = pgClient(stack.databaseUrl, stack.pgWsProxy);
  await client.connect();
  try {
    const fence = await microCluster(client);
    const uid = fence.clusterUid;
    const pid = (await client.query<{ p: number }>('select pg_backend_pid() as p')).rows[0]!.p;
    const cpuSeconds = () => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e9;
    const items = deviceItems(10_000, 'fast');
    // The rows first, then statistics on them: a fresh table's missing statistics kept Postgres on
    // custom plans (a planning per statement) for whichever size ran first.
    for (let k = 0; k < 5; k++) {
      const b = buildBatch(items.slice(k * 2_000, (k + 1) * 2_000), {}).batch;
      await client.query({ name: 'micro_insert', text: INGEST_SQL, values: ingestParams(fence, b) });
    }
    await client.query('analyze');
    console.log('| rows per statement | full: wall | full: backend CPU | lean: wall | lean: backend CPU | lean / full CPU |');
    console.log('|---:|---:|---:|---:|---:|---:|');
    for (const size of [100, 400, 2_000]) {
      const batches = Array.from({ length: 10_000 / size }, (_, k) => buildBatch(items.slice(k * size, (k + 1) * size), {}).batch);
      const variants = [
        { key: 'full', statement: (b: IngestBatch) => ({ text: INGEST_SQL, params: ingestParams(fence, b), name: `micro_full_${size}` }) },
        { key: 'lean', statement: (b: IngestBatch) => ({ ...ingestStatement(fence, b), name: `micro_lean_${size}` }) },
      ];
      const run = async (v: (typeof variants)[number], b: IngestBatch): Promise<[number, number]> => {
        const s = v.statement(b);
        const c0 = cpuSeconds();
        const t0 = performance.now();
        const r = await client.query<{ fenced: boolean }>({ name: s.name, text: s.text, values: s.params });
        const wall = performance.now() - t0;
        if (r.rows[0]?.fenced !== true) throw new Error(`${v.key}: fenced off`);
        return [wall, (cpuSeconds() - c0) * 1000];
      };
      if (variants[1]!.statement(batches[0]!).text === INGEST_SQL) throw new Error('a batch of device rows did not take the lean statement');
      for (const v of variants) for (let i = 0; i < 8; i++) await run(v, batches[i % batches.length]!);
      const wall: Record<string, number[]> = { full: [], lean: [] };
      const cpu: Record<string, number[]> = { full: [], lean: [] };
      let k = 0;
      for (let r = 0; r < reps; r++) {
        for (const v of variants) {
          const [w, c] = await run(v, batches[k++ % batches.length]!);
          wall[v.key]!.push(w);
          cpu[v.key]!.push(c);
        }
      }
      const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      const f = (x: number) => `${x.toFixed(2)} ms`;
      console.log(`| ${size.toLocaleString('en-US')} | ${f(med(wall.full!))} | ${f(mean(cpu.full!))} | ${f(med(wall.lean!))} | ${f(mean(cpu.lean!))} | ${(mean(cpu.lean!) / mean(cpu.full!)).toFixed(2)}× |`);
    }
    const { rows } = await client.query<{ n: string }>('select count(*) as n from devices where cluster_uid = $1', [uid]);
    if (Number(rows[0]?.n) !== 10_000) throw new Error(`expected 10,000 device rows, found ${rows[0]?.n}`);
  } finally {
    await client.end().catch(() => undefined);
    await stack.dropDatabase?.();
    await stack.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
