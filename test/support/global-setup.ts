/**
 * Starts the database side of the hub once for the whole `vitest run` and hands its addresses
 * to every project through `provide` / `inject`.
 *
 * Which Postgres (see pickDatabaseUrlForTests): DATABASE_URL when set, else 127.0.0.1:5432 when
 * it answers within ~500 ms, else embedded PGlite. On a real server the run creates its own
 * database `wingsmith_test_<random>` (and a migrated template from which each hub-running test file
 * copies a database of its own, test/support/file-database.ts) and force-drops them at the end (and drops those of earlier
 * runs that were killed before their teardown); with PGlite it uses a fresh temporary data
 * directory.
 *
 * WINGSMITH_TEST_EMBEDDED=1 forces PGlite even when a server is reachable, e.g.
 * `WINGSMITH_TEST_EMBEDDED=1 npm test -- --project workers`.
 *
 * Wiring (checked on vitest 4.1): this file is the *root* config's `globalSetup`. Vitest always
 * runs the root project's global setup, once, whichever projects are selected, and every
 * project's provided context inherits the root's (TestProject.getProvidedContext), so
 * `inject()` works in every project, and in cloudflareTest's options callback, which runs
 * when the workers pool starts, after global setup. The projects must not use `extends: true`:
 * they would inherit this globalSetup and start one stack per project.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { chromiumExecutable } from '../browser/support/chromium';
import { prebuildHub } from './prebuilt-hub';
import { pickDatabaseUrlForTests, startDevStack, TEST_DATABASE_PREFIX, testDatabaseName } from '../../scripts/lib/dev-stack';

declare module 'vitest' {
  export interface ProvidedContext {
    /** DATABASE_URL for the hub and for Node-side helpers (through `pgWsProxy`). */
    databaseUrl: string;
    /** `127.0.0.1:PORT` of the WebSocket proxy in front of that database (PG_WS_PROXY). */
    pgWsProxy: string;
    /** True when the run uses embedded PGlite (one backend: no overlapping transactions). */
    embeddedPostgres: boolean;
    /** The migrated template a test file copies its own database from (test/support/file-database.ts); null on PGlite. */
    databaseTemplate: string | null;
    /** A wrangler.toml starting the hub built once for the run (test/support/prebuilt-hub.ts); null: build at each start. */
    hubConfigPath: string | null;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const forceEmbedded = process.env.WINGSMITH_TEST_EMBEDDED === '1';
  const serverUrl = forceEmbedded ? undefined : await pickDatabaseUrlForTests();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-test-pg-'));
  const started = Date.now();
  const stack = await startDevStack(
    serverUrl
      ? { databaseUrl: serverUrl, dataDir, createDatabase: testDatabaseName(), reapStaleDatabases: TEST_DATABASE_PREFIX, template: true }
      : { dataDir },
  );
  console.log(
    `[global-setup] ${stack.embedded ? 'embedded PGlite' : new URL(stack.databaseUrl).pathname.slice(1) + ' on ' + new URL(stack.databaseUrl).host}` +
      ` via proxy ${stack.pgWsProxy} (${Date.now() - started} ms)`,
  );

  project.provide('databaseUrl', stack.databaseUrl);
  project.provide('pgWsProxy', stack.pgWsProxy);
  project.provide('embeddedPostgres', stack.embedded);
  project.provide('databaseTemplate', stack.templateDatabase);

  // Built once for every project that starts hubs in wrangler's dev environment.
  let hubConfigPath: string | null = null;
  if (['hub', 'e2e', 'e2e-fresh', 'browser'].some((p) => project.vitest.matchesProjectFilter(p))) {
    const building = Date.now();
    hubConfigPath = await prebuildHub(dataDir);
    console.log(`[global-setup] hub built once for the run (${Date.now() - building} ms)`);
  }
  project.provide('hubConfigPath', hubConfigPath);

  // Unpacked here, once, because test files running side by side raced to unpack it (chromium.ts).
  if (project.vitest.matchesProjectFilter('browser')) {
    const unpacking = Date.now();
    await chromiumExecutable();
    console.log(`[global-setup] chromium ready (${Date.now() - unpacking} ms)`);
  }

  return async () => {
    try {
      await stack.dropDatabase?.();
    } finally {
      await stack.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  };
}
