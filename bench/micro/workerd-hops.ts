/**
 * What each hop of a desired change costs inside local workerd, one at a time, beside the Worker
 * answering with nothing: the floor under the single-change figure of the desired benchmark.
 *
 *   npx tsx bench/micro/workerd-hops.ts [--n 2000] [--statements 1000]
 *
 * The worker (bench/micro/hops-worker.ts, started with wrangler as the benchmark starts the hub:
 * clients on the Worker's direct socket, Miniflare's explorer off) has a session-like object
 * holding this client's WebSocket and a gateway-like object. Cases, taken in turns request by
 * request so the machine's drift moves all alike (median ms, request started → response, or →
 * frame at the client for the sending cases):
 * - nothing: the Worker answers at once (the runtime's request entry);
 * - rpc: the Worker calls an object, which answers;
 * - send / send+store: the Worker calls the session-like object, which sends a frame, alone or
 *   with a SQLite row written in the same turn (the replay buffer's stamp: the frame waits for
 *   its commit);
 * - relay / relay+store: Worker → gateway-like object → session-like object, which sends (the
 *   hub's path, minus the statement and the hub's own code).
 * Then, from the gateway-like object, a committed single-row upsert through the Neon driver and
 * the proxy the hub uses, with the driver's write coalescing on (the hub's setting) and off, and
 * the cost of a zero timer.
 */
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { startPgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { directOrigin, installDirectSocket, wantDirectSocket } from '../lib/direct-socket';
import { median } from '../lib/stats';
import { NO_ENV_FILES } from '../../scripts/lib/no-env-files';

installDirectSocket();
// As the benchmark's hub: no explorer wrapper around the objects (bench/lib/env.ts).
process.env.X_LOCAL_EXPLORER = 'false';
process.env.WRANGLER_SEND_METRICS = 'false';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '2000' },
    statements: { type: 'string', default: '1000' },
    database: { type: 'string', default: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const n = Number(values.n);
const target = new URL(values.database);
const proxy = await startPgWsProxy({ target: { host: target.hostname, port: Number(target.port || 5432) } });
const { unstable_DevEnv } = await import('wrangler');
wantDirectSocket('wingsmith-hops');
const devEnv = new unstable_DevEnv();
const worker = await devEnv.startWorker({
  config: new URL('./hops.toml', import.meta.url).pathname,
  sendMetrics: false,
  envFiles: NO_ENV_FILES,
  bindings: {
    PROXY: { type: 'plain_text', value: `127.0.0.1:${proxy.port}` },
    DATABASE_URL: { type: 'plain_text', value: values.database },
  },
  dev: { server: { hostname: '127.0.0.1', port: 0 }, inspector: false, persist: false, watch: false, logLevel: 'warn' },
});
try {
  await worker.ready;
  let base: string | null = null;
  for (let i = 0; i < 200 && !base; i++) {
    base = await directOrigin('wingsmith-hops');
    if (!base) await new Promise((r) => setTimeout(r, 50));
  }
  if (!base) throw new Error('no direct socket for the hops worker');
  const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/ws`, { perMessageDeflate: false });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  let arrived: ((at: number) => void) | null = null;
  ws.on('message', () => arrived?.(performance.now()));

  const request = async (path: string): Promise<number> => {
    const t0 = performance.now();
    const res = await fetch(base + path);
    await res.text();
    return performance.now() - t0;
  };
  const delivered = async (path: string): Promise<number> => {
    const frame = new Promise<number>((resolve) => (arrived = resolve));
    const t0 = performance.now();
    const res = await fetch(base + path);
    await res.text();
    return (await frame) - t0;
  };
  const cases: [string, (i: number) => Promise<number>][] = [
    ['nothing: the request entry', () => request('/nothing')],
    ['rpc: Worker → object', (i) => request(`/rpc?n=${i}`)],
    ['send: Worker → session, frame', (i) => delivered(`/send?n=${i}&store=0`)],
    ['send+store: … with a SQLite row', (i) => delivered(`/send?n=${i}&store=1`)],
    ['relay: Worker → gateway → session, frame', (i) => delivered(`/relay?n=${i}&store=0`)],
    ['relay+store: … with a SQLite row', (i) => delivered(`/relay?n=${i}&store=1`)],
  ];
  const times = cases.map(() => [] as number[]);
  for (let i = 0; i < n + 100; i++) {
    for (let k = 0; k < cases.length; k++) {
      const ms = await (cases[k] as (typeof cases)[number])[1](i);
      if (i >= 100) times[k]?.push(ms);
    }
  }
  const floor = median(times[0] as number[]);
  console.log(`hops (${n} each, in turns; median ms, and over the request entry):`);
  cases.forEach(([label], k) => {
    const m = median(times[k] as number[]);
    console.log(`  ${label.padEnd(44)} ${m.toFixed(3)}   +${(m - floor).toFixed(3)}`);
  });
  ws.close();

  const statements = Number(values.statements);
  console.log(`a committed single-row upsert from an object through the Neon driver (${statements} in a row, 3 rounds):`);
  for (let round = 0; round < 3; round++) {
    for (const coalesce of [true, false]) {
      const r = (await (await fetch(`${base}/statements?coalesce=${coalesce ? 1 : 0}&n=${statements}`)).json()) as { msPerStatement: number };
      console.log(`  coalesceWrites ${coalesce ? 'on ' : 'off'}  ${r.msPerStatement.toFixed(3)} ms per statement`);
    }
  }
  const timers = 1000;
  const t0 = performance.now();
  await request(`/timers?n=${timers}`);
  const t = performance.now() - t0;
  console.log(`${timers} zero timers awaited one after another in the Worker: ${t.toFixed(2)} ms (${((1000 * t) / timers).toFixed(1)} µs each, the request included)`);
} finally {
  await worker.dispose();
  await proxy.close();
}
