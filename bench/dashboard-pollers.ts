/**
 * What open dashboards cost the hub: `npx tsx bench/dashboard-pollers.ts [--pollers 100] [--seconds 20]`.
 *
 * Starts a database (a fresh database on 127.0.0.1:5432 when it answers, else the embedded
 * Postgres), the hub in workerd, and a simulated cluster with 4 nodes of 8 GPUs that stays
 * connected throughout (so its live view, and the fleet answer's ETag, change every poll
 * interval, as in a real fleet). Then three windows of the same length:
 *
 *   idle      no dashboard open
 *   shared    N dashboards on the fleet view, polling exactly as the page does: every second
 *             GET /admin/fleet (and every fifth second GET /admin/clusters) with If-None-Match
 *             and Cache-Control: max-age=1 (so the hub may share one answer between them)
 *   unshared  the same N pollers without max-age: every poll runs its statements (what the
 *             shared answers save)
 *
 * and prints, per window, Postgres transactions/s in the hub's database (pg_stat_database;
 * every hub statement is one transaction), the CPU of the hub's workerd and of wrangler's dev
 * proxy (a local-only relay in front of it),
 * and the polls answered (200 vs 304). Bounded: loopback only, stops by itself.
 */
import { parseArgs } from 'node:util';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pickDatabaseUrlForTests, startDevStack, testDatabaseName } from '../scripts/lib/dev-stack';
import { pgClient } from '../scripts/lib/pg-node';
import { startSimChild } from '../scripts/lib/sim-child';
import { launchHub } from '../test/e2e/support/launch';
import { hasOpenFileUnder, readCpuSeconds, workerdChildren } from './lib/proc';

const { values } = parseArgs({ options: { pollers: { type: 'string' }, seconds: { type: 'string' } } });
const POLLERS = Number(values.pollers ?? 100);
const SECONDS = Number(values.seconds ?? 20);
const ADMIN = 'bench-admin-token';

process.env.WRANGLER_SEND_METRICS = 'false';
process.env.CLOUDFLARE_CF_FETCH_ENABLED = 'false';

const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-pollers-'));
const server = await pickDatabaseUrlForTests();
const stack = await startDevStack(server ? { databaseUrl: server, dataDir, createDatabase: testDatabaseName() } : { dataDir });
const hub = await launchHub({ vars: { DATABASE_URL: stack.databaseUrl, PG_WS_PROXY: stack.pgWsProxy, ADMIN_TOKEN: ADMIN } });
const db = pgClient(stack.databaseUrl, stack.pgWsProxy);
await db.connect();

const created = (await (
  await fetch(`${hub.url}/admin/clusters`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'demo' }),
  })
).json()) as { enrollment_token: string };
const sim = startSimChild(['--hub', hub.url, '--token', created.enrollment_token, '--cluster', 'demo', '--summary-every', '0', '--log-level', 'warn'], () => undefined);

async function xacts(): Promise<number> {
  const { rows } = await db.query<{ n: string }>('select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()');
  return Number(rows[0]?.n ?? 0);
}
/**
 * Wrangler runs two workerd processes locally: the hub, and its dev proxy that relays every
 * request (absent from a deployment). The hub's is the one with Durable Object files open.
 */
function workerds(): { hub: number; proxy: number[] } {
  const all = workerdChildren();
  const hubPid = all.find((p) => hasOpenFileUnder(p, hub.persistDir));
  if (hubPid === undefined) throw new Error('cannot tell which workerd runs the hub');
  return { hub: hubPid, proxy: all.filter((p) => p !== hubPid) };
}
const cpuOf = (pids: number[]) => pids.reduce((sum, pid) => sum + readCpuSeconds(pid), 0);

interface Counts {
  ok: number;
  notModified: number;
  failed: number;
}

/**
 * One dashboard on the fleet view, as src/hub/dashboard/static/fleet.js polls: the fleet every
 * second, the cluster list every fifth second, each with the ETag of its last answer.
 */
async function poller(until: number, shared: boolean, counts: Counts): Promise<void> {
  const etags = new Map<string, string>();
  // Spread the pollers over the second, as independent browsers would be.
  await new Promise((r) => setTimeout(r, Math.random() * 1000));
  for (let tick = 0; Date.now() < until; tick++) {
    const started = Date.now();
    const paths = tick % 5 === 0 ? ['/admin/fleet?hours=6', '/admin/clusters?limit=500'] : ['/admin/fleet?hours=6'];
    await Promise.all(
      paths.map(async (p) => {
        const headers: Record<string, string> = { authorization: `Bearer ${ADMIN}` };
        if (shared) headers['cache-control'] = 'max-age=1';
        const tag = etags.get(p);
        if (tag) headers['if-none-match'] = tag;
        try {
          const res = await fetch(hub.url + p, { headers });
          await res.arrayBuffer();
          if (res.status === 304) counts.notModified++;
          else if (res.ok) {
            counts.ok++;
            const e = res.headers.get('etag');
            if (e) etags.set(p, e);
          } else counts.failed++;
        } catch {
          counts.failed++;
        }
      }),
    );
    await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (Date.now() - started))));
  }
}

async function window(name: string, pollers: number, shared: boolean) {
  const counts: Counts = { ok: 0, notModified: 0, failed: 0 };
  const x0 = await xacts();
  const w = workerds();
  const c0 = cpuOf([w.hub]);
  const p0 = cpuOf(w.proxy);
  const t0 = Date.now();
  const until = t0 + SECONDS * 1000;
  await Promise.all([...Array.from({ length: pollers }, () => poller(until, shared, counts)), new Promise((r) => setTimeout(r, SECONDS * 1000))]);
  const secs = (Date.now() - t0) / 1000;
  // Minus the one transaction of this measurement's own reading.
  const tps = (await xacts() - x0 - 1) / secs;
  const cpu = (cpuOf([w.hub]) - c0) / secs;
  const proxyCpu = (cpuOf(w.proxy) - p0) / secs;
  return { name, pollers, tps, cpu, proxyCpu, polls: (counts.ok + counts.notModified) / secs, notModifiedShare: counts.notModified / Math.max(1, counts.ok + counts.notModified), failed: counts.failed };
}

try {
  // Let the simulated cluster connect and finish its first snapshot.
  await new Promise((r) => setTimeout(r, 5000));
  const results = [await window('idle', 0, true), await window('shared', POLLERS, true), await window('unshared', POLLERS, false)];
  console.log(`\n${POLLERS} dashboards on the fleet view, ${SECONDS} s per window, ${server ? 'Postgres server' : 'embedded Postgres'}\n`);
  console.log('| window | dashboards | polls answered/s | answered 304 | Postgres transactions/s | hub workerd CPU (cores) | dev proxy workerd CPU (cores) | failed polls |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    console.log(`| ${r.name} | ${r.pollers} | ${r.polls.toFixed(0)} | ${(r.notModifiedShare * 100).toFixed(0)}% | ${r.tps.toFixed(1)} | ${r.cpu.toFixed(3)} | ${r.proxyCpu.toFixed(3)} | ${r.failed} |`);
  }
} finally {
  await sim.stop(5000).catch(() => undefined);
  await db.end().catch(() => undefined);
  await hub.stop();
  await stack.dropDatabase?.().catch(() => undefined);
  await stack.close();
  await rm(dataDir, { recursive: true, force: true });
}
