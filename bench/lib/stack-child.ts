/**
 * The database side of the benchmark in a process of its own: Postgres selection, a fresh
 * database `bench_<random>`, the WebSocket→TCP proxy the hub's Neon driver goes through, and
 * the migrations. Kept out of the load generator's process so the proxy's work never shares an
 * event loop with the clients whose latency we measure.
 *
 * Protocol (IPC): sends {type:'ready', ...} once up; on {type:'stop'} (or the parent going
 * away) drops the database, closes and exits.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pickDatabaseUrlForTests, startDevStack, type DevStack } from '../../scripts/lib/dev-stack';
import { redactUrl, withPg } from '../../scripts/lib/pg-node';

async function main(): Promise<void> {
  const serverUrl = await pickDatabaseUrlForTests();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-pg-'));
  const name = `bench_${randomBytes(6).toString('hex')}`;
  let stack: DevStack;
  try {
    stack = await startDevStack({
      ...(serverUrl ? { databaseUrl: serverUrl, createDatabase: name, reapStaleDatabases: 'bench_' } : {}),
      dataDir,
    });
  } catch (err) {
    process.send?.({ type: 'error', message: err instanceof Error ? err.stack ?? err.message : String(err) });
    await rm(dataDir, { recursive: true, force: true });
    process.exit(1);
  }
  const version = await withPg(stack.databaseUrl, stack.pgWsProxy, async (c) => {
    const { rows } = await c.query<{ v: string; mc: string }>(
      "select version() as v, current_setting('max_connections') as mc",
    );
    return rows[0];
  });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await stack.dropDatabase?.().catch(() => undefined);
    await stack.close().catch(() => undefined);
    await rm(dataDir, { recursive: true, force: true });
    process.exit(0);
  };
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'stop') void stop();
  });
  process.on('disconnect', () => void stop());
  process.send?.({
    type: 'ready',
    databaseUrl: stack.databaseUrl,
    pgWsProxy: stack.pgWsProxy,
    embedded: stack.embedded,
    database: stack.embedded ? 'embedded PGlite' : redactUrl(stack.databaseUrl),
    serverVersion: version?.v ?? 'unknown',
    maxConnections: Number(version?.mc ?? Number.NaN),
    pid: process.pid,
  });
}

void main();
