/**
 * Start the hub in real workerd with exactly the bindings given: the run's build in Miniflare
 * (`prebuilt`), or the source through wrangler's in-process dev server. No vitest in here:
 * `worker.ts` wraps it for the suites (filling the database bindings from the run's global setup),
 * and `scripts/soak.ts` calls it directly.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Miniflare, type WorkerOptions } from 'miniflare';
import { unstable_getMiniflareWorkerOptions, unstable_startWorker } from 'wrangler';
import { prebuiltModules } from '../../support/prebuilt-hub';
import { NO_ENV_FILES } from '../../../scripts/lib/no-env-files';

const CONFIG_PATH = fileURLToPath(new URL('../../../wrangler.toml', import.meta.url));

export interface LaunchOptions {
  /** Every binding the hub gets (DATABASE_URL, PG_WS_PROXY, ADMIN_TOKEN, timers…). */
  vars: Record<string, string>;
  /**
   * Durable Object storage directory. Omitted: a fresh temporary one, deleted on stop (a new
   * hub knows no session). Given: used as is and kept on stop, so a hub started again on it
   * finds its session objects where the previous one left them (a restart of the same pod).
   */
  persistDir?: string;
  /** Listen on this port (0 or omitted: any free one). */
  port?: number;
  /** A region's environment of wrangler.toml (e.g. 'eu'); omitted: the default deployment. */
  env?: string;
  /**
   * The wrangler.toml to start (its `main` beside it): a copy of the source taken once, so that a
   * long run that starts the hub again and again (the soak's restarts) runs one source throughout.
   * Omitted: the working tree's.
   */
  configPath?: string;
  /**
   * `configPath` is a build made by test/support/prebuilt-hub.ts: start it in Miniflare directly,
   * one workerd process serving the port, instead of through wrangler's dev environment, which
   * starts a second one (its proxy worker) in front and relays every request and frame through it.
   */
  prebuilt?: boolean;
}

export interface LaunchedHub {
  /** `http://127.0.0.1:PORT` */
  url: string;
  /** `ws://127.0.0.1:PORT` */
  wsUrl: string;
  adminToken: string;
  persistDir: string;
  stop(): Promise<void>;
}

function hubLogLevel(): 'debug' | 'info' | 'log' | 'warn' | 'error' {
  const v = process.env.E2E_HUB_LOG;
  return v === 'debug' || v === 'info' || v === 'log' || v === 'error' ? v : 'warn';
}

/** Wrangler's order of log levels: a level shows what is at or before it here. */
const LEVELS = ['error', 'warn', 'info', 'log', 'debug'] as const;

/**
 * The Worker's console lines to this process's console, as wrangler's dev environment prints them
 * (a test reading the hub's lines wraps the console: test/hub/support/hub-lines.ts), filtered by
 * E2E_HUB_LOG as wrangler's `logLevel` filters them.
 */
function printWorkerLine({ level, message }: { level: string; message: string }): void {
  const at = LEVELS.indexOf(level as (typeof LEVELS)[number]);
  // A level workerd adds later is shown as console.log's is.
  if ((at < 0 ? LEVELS.indexOf('log') : at) > LEVELS.indexOf(hubLogLevel())) return;
  if (level === 'error') console.error(message);
  else if (level === 'warn') console.warn(message);
  else if (level === 'info' || level === 'debug') console.info(message);
  else console.log(message);
}

/** What wrangler makes of the configuration for Miniflare, per configuration and environment (the file is not edited during a run). */
const workerOptionsFor = new Map<string, WorkerOptions>();

function prebuiltWorkerOptions(configPath: string, env: string | undefined, vars: Record<string, string>): WorkerOptions {
  const key = `${configPath}\n${env ?? ''}`;
  let base = workerOptionsFor.get(key);
  if (!base) {
    base = unstable_getMiniflareWorkerOptions(configPath, env).workerOptions as WorkerOptions;
    workerOptionsFor.set(key, base);
  }
  const { modulesRoot, modules } = prebuiltModules(configPath);
  return {
    ...base,
    modulesRoot,
    modules,
    // No .env/.dev.vars from the developer's tree: the caller decides every binding (and
    // getMiniflareWorkerOptions reads only the configuration's [vars]).
    bindings: { ...(base.bindings ?? {}), ...vars },
  } as WorkerOptions;
}

async function launchPrebuilt(options: LaunchOptions & { configPath: string }, persistDir: string, cleanup: () => Promise<void>): Promise<LaunchedHub> {
  let mf: Miniflare | undefined;
  try {
    mf = new Miniflare({
      host: '127.0.0.1',
      port: options.port ?? 0,
      // Where wrangler's dev environment keeps a persist directory's state (tests read `v3/do`).
      defaultPersistRoot: path.join(persistDir, 'v3'),
      // Offline: the fallback `request.cf`, never a download of one.
      cf: false,
      handleStructuredLogs: printWorkerLine,
      workers: [prebuiltWorkerOptions(options.configPath, options.env, options.vars)],
    });
    const running = mf;
    const url = await running.ready;
    const origin = `http://${url.hostname}:${url.port}`;
    return {
      url: origin,
      wsUrl: origin.replace(/^http/, 'ws'),
      adminToken: options.vars.ADMIN_TOKEN ?? '',
      persistDir,
      stop: async () => {
        await running.dispose();
        await cleanup();
      },
    };
  } catch (err) {
    await mf?.dispose().catch(() => undefined);
    await cleanup();
    throw err;
  }
}

export async function launchHub(options: LaunchOptions): Promise<LaunchedHub> {
  const vars = options.vars;
  const owned = options.persistDir === undefined;
  // Durable Object storage of one hub must not leak into the next one unless asked to.
  const persistDir = options.persistDir ?? (await mkdtemp(path.join(tmpdir(), 'wingsmith-hub-')));
  const cleanup = async () => {
    if (owned) await rm(persistDir, { recursive: true, force: true });
  };
  if (options.prebuilt) {
    if (!options.configPath) throw new Error('launchHub: prebuilt needs the configPath of a build');
    return launchPrebuilt({ ...options, configPath: options.configPath }, persistDir, cleanup);
  }
  const worker = await unstable_startWorker({
    config: options.configPath ?? CONFIG_PATH,
    ...(options.env ? { env: options.env } : {}),
    sendMetrics: false,
    // No .env/.dev.vars from the developer's tree: the caller decides every binding.
    envFiles: NO_ENV_FILES,
    bindings: Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, { type: 'plain_text' as const, value: v }])),
    dev: {
      server: { hostname: '127.0.0.1', port: options.port ?? 0 },
      inspector: false,
      persist: persistDir,
      watch: false,
      // E2E_HUB_LOG=info (or debug) shows the hub's own log lines while debugging a suite.
      logLevel: hubLogLevel(),
    },
  });
  try {
    const url = await worker.url;
    const origin = `http://${url.hostname}:${url.port}`;
    return {
      url: origin,
      wsUrl: origin.replace(/^http/, 'ws'),
      adminToken: vars.ADMIN_TOKEN ?? '',
      persistDir,
      stop: async () => {
        await worker.dispose();
        await cleanup();
      },
    };
  } catch (err) {
    await worker.dispose().catch(() => undefined);
    await cleanup();
    throw err;
  }
}
