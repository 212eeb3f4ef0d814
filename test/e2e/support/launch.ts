/**
 * Start the hub in real workerd (wrangler's in-process dev server) with exactly the bindings
 * given. No vitest in here: `worker.ts` wraps it for the suites (filling the database bindings
 * from the run's global setup), and `scripts/soak.ts` calls it directly.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { unstable_startWorker } from 'wrangler';
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

export async function launchHub(options: LaunchOptions): Promise<LaunchedHub> {
  const vars = options.vars;
  const owned = options.persistDir === undefined;
  // Durable Object storage of one hub must not leak into the next one unless asked to.
  const persistDir = options.persistDir ?? (await mkdtemp(path.join(tmpdir(), 'wingsmith-hub-')));
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
  const cleanup = async () => {
    if (owned) await rm(persistDir, { recursive: true, force: true });
  };
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
