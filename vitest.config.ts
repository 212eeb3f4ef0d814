import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import { copyDatabase, pickDatabaseUrlForTests } from './scripts/lib/dev-stack';
import SuiteSequencer from './test/support/sequencer';

// One database stack per run, started by the root globalSetup and handed to every project with
// provide/inject (see test/support/global-setup.ts for why it lives at the root and why the
// projects do not `extends: true`).

/** Fast timers so the suite can exercise every timeout in seconds (the real values are tested in e2e). */
const FAST_TIMERS = {
  HANDSHAKE_TIMEOUT_MS: '1500',
  // Advertised only (the hub does not ping): an idle limit under two ping intervals is refused
  // at startup, since operators ignore it (src/hub/config.ts).
  PING_INTERVAL_MS: '1000',
  IDLE_TIMEOUT_MS: '3000',
  POLL_INTERVAL_MS: '300',
  HOLE_TIMEOUT_MS: '2500',
  RETENTION_MS: '2000',
  PG_QUERY_TIMEOUT_MS: '1500',
};

/**
 * Console output goes straight to the process's streams, not through vitest's per-test relay.
 * The relay is an RPC call per line, and vitest rejects any still pending when a file's worker
 * closes ("EnvironmentTeardownError: Closing rpc while \"onUserConsoleLog\" was pending"), which
 * failed a run whose 1,447 tests all passed. A line written after its file's last test is normal
 * here: a session object logs its connection's end once the test's peer has gone. `vi.spyOn(console,
 * ...)` sees every line either way; what is lost is only the reporter's per-test heading.
 */
const CONSOLE = { disableConsoleIntercept: true } as const;

/**
 * A vitest-pool-workers project: the real Worker and session object in workerd, on the test database.
 *
 * 0.15.1 has no `isolatedStorage`/`singleWorker` options any more: every test file gets its own
 * Miniflare (fresh in-memory Durable Object storage), while tests within one file share it
 * (checked with listDurableObjectIds across two files). Use `reset()` or
 * `abortAllDurableObjects()` from cloudflare:test where a file needs a clean slate between tests.
 */
function workersProject(
  name: string,
  include: string[],
  vars: Record<string, string>,
  environment?: string,
): TestProjectInlineConfiguration {
  return {
    plugins: [
      cloudflareTest(async ({ inject }) => ({
        wrangler: { configPath: './wrangler.toml', ...(environment ? { environment } : {}) },
        miniflare: {
          bindings: {
            // A database of the project's own, as each hub-running test file has
            // (test/support/file-database.ts says why).
            DATABASE_URL: await projectDatabaseUrl(inject('databaseUrl'), inject('pgWsProxy'), inject('databaseTemplate')),
            // The embedded Postgres's one database serves both projects' regions in turn
            // (test/workers/support/shared-database-region.ts).
            ...(inject('databaseTemplate') === null ? { WINGSMITH_TEST_SHARED_DATABASE: '1' } : {}),
            PG_WS_PROXY: inject('pgWsProxy'),
            ADMIN_TOKEN: 'test-admin-token',
            ...vars,
          },
        },
      })),
    ],
    // A real runtime, a real database and real timers on two shared cores: a test that fails is
    // run once more, and the retry shows in the output ("retry x1"). A bug fails both.
    test: { name, include, setupFiles: ['./test/workers/support/shared-database-region.ts'], testTimeout: 30_000, hookTimeout: 30_000, retry: 1, ...CONSOLE },
  };
}

function projectDatabaseUrl(databaseUrl: string, proxy: string, template: string | null): Promise<string> {
  return template === null ? Promise.resolve(databaseUrl) : copyDatabase(databaseUrl, proxy, template);
}

/**
 * Whether the run falls back to embedded PGlite (test/support/global-setup.ts decides the same
 * way): it has a single backend, which files running side by side would queue on.
 */
/** Unit files that mock modules (vi.mock): their mocks must not leak into a shared module graph. */
const UNIT_FRESH_MODULE_GRAPH = [
  'test/unit/operator/outbound-log-faults.test.ts',
  'test/unit/operator/outbound-log-faults.property.test.ts',
  'test/unit/operator/state-lock.test.ts',
  'test/unit/operator/outbound-log-rewrite.test.ts',
  'test/unit/protocol/envelope.test.ts',
];

/**
 * e2e files that need a module graph of their own: 'e2e' shares one per worker. The bench's
 * modules hook wrangler's loading (bench/lib/direct-socket.ts) and refuse to once another file
 * has loaded it.
 */
const E2E_FRESH_MODULE_GRAPH = ['test/e2e/bench-direct-socket.test.ts', 'test/e2e/bench-load.test.ts'];

const embedded = process.env.WINGSMITH_TEST_EMBEDDED === '1' || (await pickDatabaseUrlForTests()) === undefined;

export default defineConfig({
  test: {
    globalSetup: ['./test/support/global-setup.ts'],
    // The default output, then each test that passed only on its retry with the error of the try
    // that failed (the default reporter says "(retry x1)" and nothing of why).
    reporters: ['default', './test/support/flaky-reporter.ts'],
    // Projects in the order of test/support/file-order.ts, a project's longest files first, by the
    // durations of a recorded run (test/support/file-durations.json).
    sequence: { sequencer: SuiteSequencer },
    // Six files at a time (see the end of this note), although the machines have two cores: most of the suite waits (real
    // timers, hibernation, a runtime's and a database's round trips). One at a time took 14 of
    // CI's 15 minutes; two took 10 to 13 minutes of suite (790 s on a slow hour, 14 minutes of CI),
    // three 11 minutes of CI that same hour (666 s of suite). On 2026-12-06 (an AMD EPYC, 284
    // files) three took 14m15s of CI (791 s of suite) and four, the next run, 12m47s (707 s), with
    // no retry; the next CI, 5 tests failed twice, all of them on timing under that load. With
    // unit, e2e and browser sharing a module graph per worker (below), four took 11m40s of CI
    // (636 s of suite), no retry. Each file that runs a hub has a database of its own
    // (test/support/file-database.ts). Later that day (298 files) four took 13m36s and then
    // 15m38s of CI, past its 15 minutes; six, the next run, 12m32s (691 s of suite), with three
    // tests passing on their retry, each a test's own timing under that load (since mended).
    maxWorkers: embedded ? 1 : 6,
    projects: [
      {
        test: {
          name: 'unit',
          ...CONSOLE,
          environment: 'node',
          include: ['test/unit/**/*.test.ts'],
          exclude: [...UNIT_FRESH_MODULE_GRAPH],
          // One module graph per worker: a module graph per file took 78 s of the project's 69 s
          // of wall time in imports on this machine (15 s with this), and most of its CPU.
          isolate: false,
          // Property tests are CPU-bound and share two cores with workerd and Postgres during the
          // whole suite: vitest's 5 s default failed one of them under that load.
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: 'unit-fresh',
          ...CONSOLE,
          environment: 'node',
          include: [...UNIT_FRESH_MODULE_GRAPH],
          testTimeout: 30_000,
        },
      },
      workersProject('workers', ['test/workers/**/*.test.ts'], FAST_TIMERS),
      // The eu region's configuration exactly as wrangler.toml's [env.eu] declares it; local workerd
      // has no jurisdictions, so they are emulated (src/hub/region.ts), as `HUB_REGION=eu npm start` does.
      workersProject('workers-eu', ['test/workers-eu/**/*.test.ts'], { ...FAST_TIMERS, HUB_JURISDICTION_EMULATION: '1' }, 'eu'),
      // Raw frames from Node against the hub in real workerd (wrangler's dev server), one hub per
      // file with the configuration that file needs. Bursts of frames belong here: the
      // vitest-pool-workers harness routes each Durable Object handler call through an async
      // module import, which can reorder them.
      {
        test: {
          name: 'hub',
          ...CONSOLE,
          environment: 'node',
          // A real runtime, a real database and real timers on two shared cores: a test that fails
          // is run once more, and the retry shows in the output ("retry x1"). A bug fails both.
          retry: 1,
          include: ['test/hub/**/*.test.ts'],
          // One module graph per worker, not per file: every file imports wrangler (1.5 s of CPU)
          // and the hub's support; each file still starts its own hub and owns its database.
          isolate: false,
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'e2e',
          ...CONSOLE,
          environment: 'node',
          // A real runtime, a real database and real timers on two shared cores: a test that fails
          // is run once more, and the retry shows in the output ("retry x1"). A bug fails both.
          retry: 1,
          include: ['test/e2e/**/*.test.ts'],
          exclude: [...E2E_FRESH_MODULE_GRAPH],
          // One module graph per worker, as in 'hub': every file imports wrangler (1.5 s of CPU),
          // which took 129 s of the project's 180 s alone on this machine, 23 s with this.
          isolate: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'e2e-fresh',
          ...CONSOLE,
          environment: 'node',
          retry: 1,
          // Files that must load wrangler themselves, after a hook of their own (bench/lib/direct-socket.ts).
          include: [...E2E_FRESH_MODULE_GRAPH],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      // The dashboard in headless Chromium (from @sparticuz/chromium, installed by npm ci) against
      // `npm start -- --sim`.
      {
        test: {
          name: 'browser',
          ...CONSOLE,
          environment: 'node',
          // A real runtime, a real database and real timers on two shared cores: a test that fails
          // is run once more, and the retry shows in the output ("retry x1"). A bug fails both.
          retry: 1,
          include: ['test/browser/**/*.test.ts'],
          // One module graph per worker, as in 'hub' (wrangler and playwright-core are imported once).
          isolate: false,
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
