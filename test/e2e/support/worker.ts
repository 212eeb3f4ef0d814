/**
 * Runs the hub in real workerd for end-to-end tests: the run's build (test/support/prebuilt-hub.ts)
 * in Miniflare, the runtime under wrangler's dev server, without that server's proxy in front.
 */
import { inject } from 'vitest';
import { fileDatabaseUrl, releaseSharedDatabaseRegion } from '../../support/file-database';
import { launchHub } from './launch';

export interface StartHubOptions {
  /** Extra vars, or overrides of the defaults (DATABASE_URL, PG_WS_PROXY, ADMIN_TOKEN). */
  vars?: Record<string, string>;
  /**
   * Keep Durable Object storage in this directory (not deleted on stop), so a hub started
   * again on it is a restart of the same instance. Default: a fresh temporary directory per
   * start, deleted on stop.
   */
  persistDir?: string;
  /** Listen on this port. Default: any free one. */
  port?: number;
  /** A region's environment of wrangler.toml (e.g. 'eu'); omitted: the default deployment. */
  env?: string;
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
    DATABASE_URL: await fileDatabaseUrl(),
    PG_WS_PROXY: inject('pgWsProxy'),
    ADMIN_TOKEN: TEST_ADMIN_TOKEN,
    ...options.vars,
  };
  await releaseSharedDatabaseRegion();
  const prebuilt = inject('hubConfigPath');
  const hub = await launchHub({
    vars,
    ...(prebuilt ? { configPath: prebuilt, prebuilt: true } : {}),
    ...(options.persistDir !== undefined ? { persistDir: options.persistDir } : {}),
    ...(options.port !== undefined ? { port: options.port } : {}),
    ...(options.env !== undefined ? { env: options.env } : {}),
  });
  return { url: hub.url, wsUrl: hub.wsUrl, adminToken: vars.ADMIN_TOKEN ?? TEST_ADMIN_TOKEN, stop: hub.stop };
}
