/**
 * The end-to-end suites' fixture: one hub per test file in real workerd on the run's real
 * Postgres, the admin API, a reused Postgres connection for the checker, simulated clusters and
 * link proxies that are all torn down after the file. The hub can be restarted, on the same
 * Durable Object storage (a restart of the same instance) or on fresh storage (a different
 * instance: every session is unknown to it).
 *
 * Set E2E_LOG=debug|info|warn to see the SDK's JSON log lines on stderr.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, inject } from 'vitest';
import { fileDatabaseUrl } from '../../support/file-database';
import { jsonLogger, silentLogger, type Logger, type LogLevel } from '../../../src/operator/logger';
import { uniqueName } from '../../support/peer-core';
import type { Query } from './converge';
import { LinkProxy } from './link-proxy';
import { Admin, openQuery, type Registered } from './plane';
import { SimCluster, type ClientTuning, type SimClusterOptions } from './sim-cluster';
import { startHub, type Hub } from './worker';

/**
 * Hub timers for the suites: everything the spec times, fast. Pings every second so the SDK
 * (which pings at the welcome's `ping_interval_s`) keeps a 3 s idle limit satisfied; session
 * retention long enough that a reconnect after any fault in a test finds its session.
 */
export const E2E_VARS: Readonly<Record<string, string>> = {
  // Not shorter: on the loaded CI machine a hello took over 1.5 s to be answered (a 4408 mid-test).
  HANDSHAKE_TIMEOUT_MS: '3000',
  PING_INTERVAL_MS: '1000',
  IDLE_TIMEOUT_MS: '3000',
  POLL_INTERVAL_MS: '300',
  HOLE_TIMEOUT_MS: '2500',
  RETENTION_MS: '120000',
  PG_QUERY_TIMEOUT_MS: '1500',
};

/**
 * SDK tuning for the suites. The spec's reconnect backoff (1 s → 30 s) is configuration; the
 * suites shrink it so a fault costs a test hundreds of milliseconds instead of seconds. The
 * shape (exponential, full jitter, the cap after a refusal) is the SDK's own.
 */
export const E2E_CLIENT: ClientTuning = {
  backoff: { baseMs: 100, capMs: 800 },
  ackDelayMs: 20,
  statsIntervalMs: 300,
  stableAfterMs: 2_000,
  drainTimeoutMs: 5_000,
};

export function e2eLogger(): Logger {
  const level = process.env.E2E_LOG;
  if (level === 'debug' || level === 'info' || level === 'warn' || level === 'error') return jsonLogger({ level: level as LogLevel });
  return silentLogger;
}

export interface E2E {
  readonly hub: Hub;
  readonly admin: Admin;
  readonly query: Query;
  readonly vars: Record<string, string>;
  /** Register a cluster with a unique name. */
  register(prefix?: string): Promise<Registered>;
  /** A simulated cluster named as registered, torn down after the file. */
  cluster(name: string, options?: Omit<SimClusterOptions, 'name'>): SimCluster;
  /** A link proxy in front of the current hub, closed after the file. */
  proxy(): Promise<LinkProxy>;
  /**
   * Stop the hub and start another. `keepState`: on the same Durable Object storage (the same
   * instance restarted); else on fresh storage (a new instance). Proxies are re-pointed at it.
   */
  restartHub(options: { keepState: boolean }): Promise<Hub>;
  /**
   * A temporary directory removed after the file, once its operator processes have stopped: a
   * file's own afterAll runs before this one's and would race a still-running operator's writes.
   */
  tempDir(prefix: string): Promise<string>;
}

export function useE2E(vars: Record<string, string> = { ...E2E_VARS }, prepare?: () => Promise<Record<string, string>>): E2E {
  let hub: Hub | null = null;
  let admin: Admin | null = null;
  let q: ReturnType<typeof openQuery> | null = null;
  let persistDir = '';
  const dirs: string[] = [];
  const clusters: SimCluster[] = [];
  const proxies: LinkProxy[] = [];

  const newDir = async (prefix = 'wingsmith-e2e-do-') => {
    const d = await mkdtemp(path.join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };

  beforeAll(async () => {
    Object.assign(vars, prepare ? await prepare() : {});
    persistDir = await newDir();
    hub = await startHub({ vars, persistDir });
    admin = new Admin(hub.url, hub.adminToken);
    q = openQuery(await fileDatabaseUrl(), inject('pgWsProxy'));
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(clusters.flatMap((c) => c.running.map((p) => c.stopProcess(p, { graceful: false }))));
    for (const c of clusters) c.dispose();
    await Promise.allSettled(proxies.map((p) => p.close()));
    await q?.close();
    await hub?.stop();
    await Promise.allSettled(dirs.map((d) => rm(d, { recursive: true, force: true })));
  }, 60_000);

  const e: E2E = {
    get hub() {
      if (!hub) throw new Error('hub not started');
      return hub;
    },
    get admin() {
      if (!admin) throw new Error('hub not started');
      return admin;
    },
    query: (text, params) => {
      if (!q) throw new Error('hub not started');
      return q.query(text, params);
    },
    vars,
    register: (prefix = 'e2e') => e.admin.register(uniqueName(prefix)),
    cluster(name, options = {}) {
      const c = new SimCluster({ name, logger: e2eLogger(), ...options });
      clusters.push(c);
      return c;
    },
    async proxy() {
      const p = await LinkProxy.start({ upstream: e.hub.wsUrl });
      proxies.push(p);
      return p;
    },
    async restartHub({ keepState }) {
      await e.hub.stop();
      hub = null;
      if (!keepState) persistDir = await newDir();
      hub = await startHub({ vars, persistDir });
      e.admin.baseUrl = hub.url;
      for (const p of proxies) p.setUpstream(hub.wsUrl);
      return hub;
    },
    tempDir: (prefix) => newDir(prefix),
  };
  return e;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Poll `check` until it returns something truthy; throws after `timeoutMs` with `what`. */
export async function until<T>(what: string, check: () => T | Promise<T>, timeoutMs = 15_000, stepMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await check();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await sleep(stepMs);
  }
}
