/**
 * Runs the hub in real workerd (wrangler's in-process dev server) for end-to-end tests.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';
import { unstable_startWorker } from 'wrangler';

const CONFIG_PATH = fileURLToPath(new URL('../../../wrangler.toml', import.meta.url));

export interface StartHubOptions {
  /** Extra vars, or overrides of the defaults (DATABASE_URL, PG_WS_PROXY, ADMIN_TOKEN). */
  vars?: Record<string, string>;
}

export interface Hub {
  /** `http://127.0.0.1:PORT` */
  url: string;
  /** `ws://127.0.0.1:PORT` */
  wsUrl: string;
  adminToken: string;
  stop(): Promise<void>;
}

export const TEST_ADMIN_TOKEN = 'test-admin-token';

export async function startHub(options: StartHubOptions = {}): Promise<Hub> {
  const vars: Record<string, string> = {
    DATABASE_URL: inject('databaseUrl'),
    PG_WS_PROXY: inject('pgWsProxy'),
    ADMIN_TOKEN: TEST_ADMIN_TOKEN,
    ...options.vars,
  };
  // Durable Object storage of one hub must not leak into the next test's hub.
  const persistDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-hub-'));
  const worker = await unstable_startWorker({
    config: CONFIG_PATH,
    sendMetrics: false,
    // No .env/.dev.vars from the developer's tree: the test decides every binding.
    envFiles: [],
    bindings: Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, { type: 'plain_text' as const, value: v }])),
    dev: {
      server: { hostname: '127.0.0.1', port: 0 },
      inspector: false,
      persist: persistDir,
      watch: false,
      logLevel: 'warn',
    },
  });
  try {
    const url = await worker.url;
    const origin = `http://${url.hostname}:${url.port}`;
    return {
      url: origin,
      wsUrl: origin.replace(/^http/, 'ws'),
      adminToken: vars.ADMIN_TOKEN ?? TEST_ADMIN_TOKEN,
      stop: async () => {
        await worker.dispose();
        await rm(persistDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await worker.dispose().catch(() => undefined);
    await rm(persistDir, { recursive: true, force: true });
    throw err;
  }
}
