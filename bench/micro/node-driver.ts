/**
 * The Neon driver from Node, with and without its write coalescing: what the Socket.IO +
 * Postgres baseline (and every Node script and test) pays per statement.
 *
 *   npx tsx bench/micro/node-driver.ts [--n 2000] [--database postgres://postgres@127.0.0.1:5432/postgres]
 *
 * The driver gathers the protocol messages of a statement (Bind, Execute, Sync) into one
 * WebSocket message, sent from `setTimeout(0)`; Node runs no timer sooner than 1 ms, so each
 * statement waits for it. Two connections through the same WebSocket proxy the hub uses, one
 * with `coalesceWrites` on (the driver's default) and one off, take turns statement by statement,
 * so the machine's drift moves both alike. Two statements: a prepared select, and a prepared
 * single-row upsert that commits (a revision bump, as an admin PUT makes). Reported: the median
 * and p90 milliseconds per statement of each, and their ratio.
 */
import { parseArgs } from 'node:util';
import { Client } from '@neondatabase/serverless';
import ws from 'ws';
import { startPgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { median, summarize } from '../lib/stats';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '2000' },
    database: { type: 'string', default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const n = Number(values.n);
const target = new URL(values.database);
const proxy = await startPgWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) } });

async function connect(coalesceWrites: boolean): Promise<Client> {
  const c = new Client({ connectionString: values.database });
  const config = c.neonConfig;
  config.webSocketConstructor = ws as unknown as typeof config.webSocketConstructor;
  config.wsProxy = () => `127.0.0.1:${proxy.port}/v1`;
  config.useSecureWebSocket = false;
  config.pipelineTLS = false;
  config.pipelineConnect = false;
  config.coalesceWrites = coalesceWrites;
  await c.connect();
  return c;
}

const variants = [
  { label: 'coalesceWrites on (default)', client: await connect(true) },
  { label: 'coalesceWrites off', client: await connect(false) },
];
const table = `node_driver_bench_${process.pid}`;
await variants[0]!.client.query(`create table ${table} (k int primary key, revision bigint not null)`);
try {
  const statements = [
    { label: 'prepared select', run: (c: Client, i: number) => c.query({ name: 'nd_select', text: 'select $1::int + 1 as x', values: [i] }) },
    {
      label: 'prepared upsert, committed',
      run: (c: Client, i: number) =>
        c.query({
          name: 'nd_upsert',
          text: `insert into ${table} (k, revision) values ($1, 1) on conflict (k) do update set revision = ${table}.revision + 1`,
          values: [i % 100],
        }),
    },
  ];
  for (const s of statements) {
    const times = variants.map(() => [] as number[]);
    for (let i = 0; i < n + 100; i++) {
      for (let k = 0; k < variants.length; k++) {
        const t0 = performance.now();
        await s.run(variants[k]!.client, i);
        if (i >= 100) times[k]!.push(performance.now() - t0);
      }
    }
    const meds = times.map(median);
    console.log(`${s.label} (${n} each, in turns):`);
    variants.forEach((v, k) => console.log(`  ${v.label.padEnd(28)} median ${meds[k]!.toFixed(3)} ms, p90 ${summarize(times[k]!).p90.toFixed(3)} ms`));
    console.log(`  on / off: ${(meds[0]! / meds[1]!).toFixed(1)}×`);
  }
} finally {
  await variants[0]!.client.query(`drop table ${table}`);
  for (const v of variants) await v.client.end();
  await proxy.close();
}
