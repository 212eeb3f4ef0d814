/**
 * `npm start -- --sim` as a newcomer runs it, for the browser tests: a child process on its own
 * port and state directory, on a database of its own (a fresh one on the test run's Postgres
 * server, so the fleet holds only the demo cluster; or, when the run uses the embedded Postgres,
 * the hub's own embedded one), read through its printed banner, stopped with Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium as playwright, type Browser } from 'playwright-core';
import { chromiumArgs, chromiumExecutable } from './chromium';
import { startDevStack, testDatabaseName, type DevStack } from '../../../scripts/lib/dev-stack';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));

export interface Stack {
  url: string;
  adminToken: string;
  output(): string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * @param serverUrl a Postgres server (as the run's global setup picked it), on which this stack
 *   gets a database of its own; undefined: let npm start use its embedded Postgres.
 */
export async function startStack(opts: { serverUrl: string | undefined; vars?: Record<string, string> }): Promise<Stack> {
  const stateDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-browser-'));
  let db: DevStack | null = null;
  if (opts.serverUrl) {
    db = await startDevStack({ databaseUrl: opts.serverUrl, dataDir: stateDir, createDatabase: testDatabaseName() });
  }
  const port = await freePort();
  const adminToken = `wsadm_browser_${Math.random().toString(36).slice(2)}`;
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || k.startsWith('VITEST') || k.startsWith('WINGSMITH_') || k.startsWith('WRANGLER_')) continue;
    if (['NODE_ENV', 'DATABASE_URL', 'ADMIN_TOKEN', 'HOST', 'PORT'].includes(k)) continue;
    env[k] = v;
  }
  Object.assign(env, opts.vars ?? {}, {
    PORT: String(port),
    WINGSMITH_STATE_DIR: stateDir,
    ADMIN_TOKEN: adminToken,
    WRANGLER_SEND_METRICS: 'false',
    ...(db ? { DATABASE_URL: db.databaseUrl } : {}),
  });
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts', '--sim'], {
    cwd: REPO,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

  const cleanup = async () => {
    await db?.dropDatabase?.().catch(() => undefined);
    await db?.close().catch(() => undefined);
    await rm(stateDir, { recursive: true, force: true });
  };
  const stop = async () => {
    if (child.exitCode === null && child.pid !== undefined) {
      try {
        process.kill(-child.pid, 'SIGINT');
      } catch {
        // gone
      }
      const done = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 15_000))]);
      if (!done) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // gone
        }
        await exited;
      }
    }
    await cleanup();
  };

  const deadline = Date.now() + 90_000;
  while (!out.includes('Press Ctrl-C to stop.')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`npm start did not print its banner:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const url = /Hub URL:\s+(\S+)/.exec(out)?.[1] ?? `http://127.0.0.1:${port}`;
  return { url, adminToken, output: () => out, stop };
}

/** Headless Chromium (test/browser/support/chromium.ts says which). */
export async function launchBrowser(): Promise<Browser> {
  return playwright.launch({ executablePath: await chromiumExecutable(), args: chromiumArgs(), headless: true });
}
