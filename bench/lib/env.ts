/**
 * The system under test, started once per benchmark run: Postgres + proxy (in a child process,
 * see stack-child.ts) and the hub in real workerd through wrangler's `unstable_startWorker`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@neondatabase/serverless';
import { ulid } from 'ulid';
import type { unstable_startWorker } from 'wrangler';
import { pgClient } from '../../scripts/lib/pg-node';
import { snapshotSource, type SourceSnapshot } from '../../scripts/lib/source-snapshot';
import { withDeadline } from '../../src/hub/deadline';
import { generateEnrollmentToken, hashToken, toHex } from '../../src/hub/tokens';
import { SERVING } from './payloads';
import { RawOperator } from './operator';
import { freePort } from './pooler';
import { hasOpenFileUnder, workerdChildren } from './proc';
import { directOrigin, installDirectSocket, wantDirectSocket } from './direct-socket';
import { NO_ENV_FILES } from '../../scripts/lib/no-env-files';

/** How long stopping the old hub, or starting the new one, may take at a restart. */
const RESTART_DEADLINE_MS = 120_000;

export { snapshotSource, type SourceSnapshot };

// Before wrangler loads (it is imported lazily below): its Miniflare must be able to add the
// hub's direct socket.
installDirectSocket();

const HERE = path.dirname(fileURLToPath(import.meta.url));

export const BENCH_ADMIN_TOKEN = 'bench-admin-token';

export interface StackInfo {
  databaseUrl: string;
  pgWsProxy: string;
  embedded: boolean;
  database: string;
  serverVersion: string;
  maxConnections: number;
  pid: number;
}

/** Start a Node script of this directory tree as a child process running under tsx, with IPC. */
export function forkTs(file: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): ChildProcess {
  return fork(file, args, {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

/** Wait for the child's first message of type `ready` (or fail on `error`/exit). */
export function readyMessage<T>(child: ChildProcess, what: string, timeoutMs = 60_000): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} not ready in ${timeoutMs} ms`)), timeoutMs);
    const onMessage = (m: { type?: string; message?: string }) => {
      if (m?.type === 'ready') {
        clearTimeout(timer);
        child.off('exit', onExit);
        child.off('message', onMessage);
        resolve(m as T);
      } else if (m?.type === 'error') {
        clearTimeout(timer);
        reject(new Error(`${what}: ${m.message}`));
      }
    };
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code} before it was ready`));
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

export interface HubVars {
  [key: string]: string;
}

export interface BenchCluster {
  uid: string;
  name: string;
  token: string;
  /** Hex SHA-256 of the token, as the registry stores it (absent for admin-created clusters). */
  tokenHash?: string;
}

export class BenchEnv {
  private constructor(
    readonly stack: StackInfo,
    private readonly stackChild: ChildProcess,
    public hubUrl: string,
    public wsUrl: string,
    private worker: Awaited<ReturnType<typeof unstable_startWorker>>,
    public persistDir: string,
    readonly vars: HubVars,
    private db: Client,
  ) {}

  /** pid of the workerd process that runs the hub (not wrangler's proxy worker); set by `identifyWorkerd`. */
  workerdPid = 0;
  /** All workerd processes of this run, hub first (the other one is wrangler's dev proxy worker). */
  workerdPids: number[] = [];
  private workerdBefore = new Set<number>();
  private clusterCounter = 0;

  /** The inspector of the hub's isolate when started with `inspector: true` (for profiling). */
  inspectorUrl: URL | undefined;

  /** The source measured (see snapshotSource). */
  source!: SourceSnapshot;

  /** Facts about the measured source and schema that the analysis depends on. */
  async facts(): Promise<Record<string, number>> {
    const read = async (rel: string) => readFile(path.join(this.source.dir, rel), 'utf8').catch(() => '');
    const [ff] = await this.sql<{ ff: string | null }>(
      "select (select option_value from pg_options_to_table(reloptions) where option_name = 'fillfactor') as ff from pg_class where relname = 'devices'",
    );
    return {
      devicesFillfactor: Number(ff?.ff ?? 100),
      /** The hot operator types are validated by hand-written code proven equal to their zod schemas. */
      fastValidators: (await read('src/protocol/fast-payloads.ts')) ? 1 : 0,
      /** A second ingest statement goes out behind the first (the schedule's `behind`). */
      pipelinedIngest: (await read('src/hub/session/ingest-schedule.ts')).includes('  behind(') ? 1 : 0,
      /** When the first of the two commits, the second takes its place and another is queued behind it. */
      slidingIngest: (await read('src/hub/session/ingest-schedule.ts')).includes('  promoteBehind(') ? 1 : 0,
      /** A batch of observed rows only is written by a lean statement (`ingestStatement`). */
      leanIngest: (await read('src/hub/db/ingest.ts')).includes('export function leanSections(') ? 1 : 0,
      /** A fresh connection's upgrade writes nothing to its session object (the handshake clock in memory). */
      quietUpgrade: (await read('src/hub/session/session-clock.ts')) ? 1 : 0,
      /** A fresh session's claim reads the first page of its resync (unless turned off with `--var CLAIM_SNAPSHOT_ROWS=0`). */
      claimSnapshot: (await read('src/hub/db/claim-snapshot.ts')) && this.vars.CLAIM_SNAPSHOT_ROWS !== '0' ? 1 : 0,
      /** Clients on the Worker's direct socket, Miniflare's local explorer off (not `--dev-paths`). */
      directSocket: this.devPaths ? 0 : 1,
      /** wrangler.toml has an `[assets]` block: the assets router sits in front of every request. */
      assetsRouter: /^\[assets\]/m.test(await read('wrangler.toml')) ? 1 : 0,
    };
  }

  static async start(
    extraVars: HubVars = {},
    options: { inspector?: boolean; databaseUrl?: string; commit?: string | null; devPaths?: boolean } = {},
  ): Promise<BenchEnv> {
    process.env.WRANGLER_SEND_METRICS = 'false';
    const source = await snapshotSource(options.commit ?? null);
    const child = forkTs(path.join(HERE, 'stack-child.ts'), [], options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {});
    let stack: StackInfo;
    try {
      stack = await readyMessage<StackInfo>(child, 'database stack');
    } catch (err) {
      child.kill();
      throw err;
    }
    const vars: HubVars = {
      DATABASE_URL: stack.databaseUrl,
      PG_WS_PROXY: stack.pgWsProxy,
      ADMIN_TOKEN: BENCH_ADMIN_TOKEN,
      ...extraVars,
    };
    const db = pgClient(stack.databaseUrl, stack.pgWsProxy);
    db.on('error', () => undefined);
    await db.connect();
    const hub = await launchWorker(source.dir, vars, options.inspector === true, options.devPaths === true);
    const env = new BenchEnv(stack, child, hub.origin, hub.origin.replace(/^http/, 'ws'), hub.worker, hub.persistDir, vars, db);
    env.source = source;
    env.inspectorEnabled = options.inspector === true;
    env.devPaths = options.devPaths === true;
    await env.adopt(hub);
    return env;
  }

  private inspectorEnabled = false;
  /**
   * Measure through Miniflare's dev-only paths, as runs before 2026-12-02 did: clients enter
   * through its entry worker, and its local explorer wraps every Durable Object (launchWorker).
   */
  private devPaths = false;

  private async adopt(hub: LaunchedWorker): Promise<void> {
    this.worker = hub.worker;
    this.persistDir = hub.persistDir;
    this.hubUrl = hub.origin;
    this.wsUrl = hub.origin.replace(/^http/, 'ws');
    this.workerdBefore = hub.before;
    this.inspectorUrl = this.inspectorEnabled ? await hub.worker.inspectorUrl : undefined;
    // Wrangler starts two workerd processes: its dev proxy worker, then the runtime with the hub.
    // A session object opens its SQLite files under the persist directory: that names the runtime.
    const [probe] = await this.createClusters(1, 'probe');
    if (probe) await this.touchSession(probe);
    this.identifyWorkerd();
  }

  /**
   * A fresh hub (new workerd, empty Durable Object storage) on the same database, so a scenario
   * that measures workerd memory starts from a clean process rather than from whatever earlier
   * scenarios left in it.
   */
  async restartHub(): Promise<void> {
    // Bounded: a restart that never comes back (once, a --profile run waited on one for 12
    // minutes with no workerd left) fails the run loudly instead of wedging it.
    const late = (what: string) => () => {
      throw new Error(`bench: the hub's restart did not ${what} within ${RESTART_DEADLINE_MS / 1000} s`);
    };
    await withDeadline(this.worker.dispose().catch(() => undefined), RESTART_DEADLINE_MS, late('stop the old workerd'));
    await rm(this.persistDir, { recursive: true, force: true }).catch(() => undefined);
    const worker = await withDeadline(launchWorker(this.source.dir, this.vars, this.inspectorEnabled, this.devPaths), RESTART_DEADLINE_MS, late('start a new workerd'));
    await this.adopt(worker);
  }

  /**
   * Find which workerd runs the hub: the one holding Durable Object files open under the persist
   * directory (call after at least one session exists). Falls back to the larger RSS.
   */
  identifyWorkerd(): number {
    const pids = workerdChildren().filter((p) => !this.workerdBefore.has(p));
    const owner = pids.find((p) => hasOpenFileUnder(p, this.persistDir));
    if (!owner) throw new Error(`cannot tell which workerd runs the hub (candidates ${pids.join(', ')})`);
    this.workerdPid = owner;
    this.workerdPids = [owner, ...pids.filter((p) => p !== owner)];
    return owner;
  }

  /** pid of wrangler's dev proxy worker (in the request path locally, absent in production), or 0. */
  get proxyWorkerdPid(): number {
    return this.workerdPids[1] ?? 0;
  }

  /** Open a session for the cluster, read its initial stream, close it. */
  async touchSession(c: BenchCluster): Promise<void> {
    const op = await RawOperator.connect(this.wsUrl, c.token);
    const end = op.next((f) => f.type === 'stream.end');
    await op.hello({ cluster_id: c.name });
    await end;
    op.close();
  }

  async sql<R = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<R[]> {
    return (await this.db.query(text, params)).rows as R[];
  }

  /** A fresh Neon client through the same proxy as the hub (caller ends it). */
  async newClient(): Promise<Client> {
    const c = pgClient(this.stack.databaseUrl, this.stack.pgWsProxy);
    c.on('error', () => undefined);
    await c.connect();
    return c;
  }

  async admin(method: string, pathname: string, body?: unknown): Promise<{ status: number; json: any }> {
    const res = await fetch(`${this.hubUrl}/admin${pathname}`, {
      method,
      headers: { authorization: `Bearer ${BENCH_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  }

  /** One cluster through the admin API (the production path). */
  async createClusterViaAdmin(prefix = 'bench'): Promise<BenchCluster> {
    const name = `${prefix}-${Date.now().toString(36)}-${(this.clusterCounter++).toString(36)}`;
    const r = await this.admin('POST', '/clusters', { name });
    if (r.status !== 201) throw new Error(`create cluster: ${r.status} ${JSON.stringify(r.json)}`);
    return { uid: r.json.uid, name: r.json.name, token: r.json.enrollment_token };
  }

  /**
   * Many clusters in one statement (setup, not measured): the same rows `POST /admin/clusters`
   * writes, with tokens minted and hashed exactly as the hub does.
   */
  async createClusters(n: number, prefix = 'bench'): Promise<BenchCluster[]> {
    const out: BenchCluster[] = [];
    const rows: { uid: string; name: string; token_hash: string }[] = [];
    const stamp = Date.now().toString(36);
    for (let i = 0; i < n; i++) {
      const token = generateEnrollmentToken();
      const uid = ulid();
      const name = `${prefix}-${stamp}-${(this.clusterCounter++).toString(36)}`;
      const tokenHash = toHex(await hashToken(token));
      rows.push({ uid, name, token_hash: tokenHash });
      out.push({ uid, name, token, tokenHash });
    }
    for (let i = 0; i < rows.length; i += 2_000) {
      await this.sql(
        `insert into clusters (uid, name, token_hash, token_issued_at)
         select uid, name, decode(token_hash, 'hex'), now() from jsonb_to_recordset($1::jsonb) as x(uid text, name text, token_hash text)`,
        [JSON.stringify(rows.slice(i, i + 2_000))],
      );
    }
    return out;
  }

  /** Desired deployments written directly (setup for resync/resume sizes; not measured). */
  async seedDesired(clusterUid: string, count: number, prefix = 'dep'): Promise<void> {
    for (let start = 0; start < count; start += 5_000) {
      const n = Math.min(5_000, count - start);
      await this.sql(
        `with rev as (
           update clusters set desired_revision = desired_revision + $3 where uid = $1 returning desired_revision
         )
         insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted, updated_at)
         select $1, $4 || '-' || lpad(g::text, 6, '0'), 'w-' || g, (select desired_revision from rev) - $3 + g - $2, 1, 2, $5::jsonb, false, now()
         from generate_series($2 + 1, $2 + $3) g`,
        [clusterUid, start, n, prefix, JSON.stringify(SERVING)],
      );
    }
  }

  async stop(): Promise<void> {
    await this.db.end().catch(() => undefined);
    await this.worker.dispose().catch(() => undefined);
    await rm(this.persistDir, { recursive: true, force: true }).catch(() => undefined);
    await rm(this.source.dir, { recursive: true, force: true }).catch(() => undefined);
    await new Promise<void>((resolve) => {
      if (this.stackChild.exitCode !== null) return resolve();
      const t = setTimeout(() => {
        this.stackChild.kill('SIGKILL');
        resolve();
      }, 15_000);
      this.stackChild.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
      this.stackChild.send({ type: 'stop' });
    });
  }
}

interface ReloadComplete {
  proxyData: { userWorkerUrl: { protocol: string; hostname: string; port: string } };
}

interface LaunchedWorker {
  worker: Awaited<ReturnType<typeof unstable_startWorker>>;
  /** The hub's own socket (wrangler's dev proxy bypassed). */
  origin: string;
  persistDir: string;
  before: Set<number>;
}

async function launchWorker(sourceDir: string, vars: HubVars, inspector: boolean, devPaths: boolean): Promise<LaunchedWorker> {
  const persistDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-hub-'));
  const before = new Set(workerdChildren());
  // Clients talk to the hub's own workerd, never through wrangler's dev ProxyWorker (another
  // workerd process that relays every request and frame, there for live reload: ~1.3 ms per HTTP
  // round trip here), and by default not through Miniflare's entry worker either (direct-socket.ts).
  // Neither is part of a deployment.
  // Miniflare's local explorer (a dev UI) wraps every SQLite-backed object so that each
  // construction of a named one first writes its name into the object's storage (a table created
  // and a row written, in blockConcurrencyWhile): a commit before the hub's code runs, at every
  // fresh handshake and every wake. wrangler reads this switch when it builds Miniflare's options.
  process.env.X_LOCAL_EXPLORER = devPaths ? 'true' : 'false';
  const { unstable_DevEnv, experimental_readRawConfig } = await import('wrangler');
  const config = path.join(sourceDir, 'wrangler.toml');
  const workerName = experimental_readRawConfig({ config }).rawConfig.name;
  if (!workerName) throw new Error('wrangler.toml has no name');
  if (!devPaths) wantDirectSocket(workerName);
  const devEnv = new unstable_DevEnv();
  type Direct = { protocol: string; hostname: string; port: string };
  const proxy = devEnv.proxy as unknown as { onReloadComplete(e: ReloadComplete): void };
  const onReloadComplete = proxy.onReloadComplete.bind(proxy);
  const runtime = new Promise<Direct>((resolve) => {
    proxy.onReloadComplete = (e) => {
      resolve(e.proxyData.userWorkerUrl);
      onReloadComplete(e);
    };
  });
  const worker = await devEnv.startWorker({
    config,
    sendMetrics: false,
    envFiles: NO_ENV_FILES,
    bindings: Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, { type: 'plain_text' as const, value: v }])),
    dev: {
      server: { hostname: '127.0.0.1', port: 0 },
      inspector: inspector ? { hostname: '127.0.0.1', port: await freePort() } : false,
      persist: persistDir,
      watch: false,
      logLevel: 'warn',
    },
  });
  await worker.ready;
  // The runtime reports its entry socket once it has loaded the Worker (after the proxy is up).
  const d = await Promise.race([runtime, new Promise<null>((r) => setTimeout(() => r(null), 30_000).unref())]);
  if (!d) throw new Error("wrangler did not report the Worker's own socket");
  let origin = `http://${d.hostname}:${d.port}`;
  if (!devPaths) {
    const direct = await directOrigin(workerName);
    if (!direct) throw new Error(`no direct socket for ${workerName}: wrangler's Miniflare did not take it`);
    origin = direct;
  }
  return { worker, origin, persistDir, before };
}
