/**
 * The process that does `npm start`'s work (see scripts/start.ts for the overview, and
 * ./supervise.ts for why it runs as a child of a small supervisor).
 */
import { z } from 'zod';
import net from 'node:net';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { hubConfig, HUB_CONFIG_NAMES } from '../../src/hub/config';
import { ensureDemoCluster, DEMO_CLUSTER_NAME, type DemoCluster } from './demo-cluster';
import { startDevStack } from './dev-stack';
import { migrate } from './migrations';
import { isNeonUrl, redactUrl } from './pg-node';
import { simAvailable, startSimChild, type SimChild } from './sim-child';
import { defaultStateDirFor, REGION_VARS, RegionError, requestedRegion, resolveRegion, type StartRegion } from './start-region';
import { isSupervisorMessage, SAME_INTERRUPT_MS } from './supervise';
import { errorText } from './error-text';
import {
  displayPath,
  lockStateDir,
  REPO_ROOT,
  resolveAdminToken,
  StateLockedError,
  statePaths,
  type AdminToken,
} from './start-state';
import { NO_ENV_FILES } from './no-env-files';

const USAGE = `usage: npm start [-- --sim]

  --sim        also run a simulated cluster (scripts/sim.ts) against the demo cluster
               (same as WINGSMITH_SIM=1)

environment:
  PORT, HOST            where the hub listens (default 127.0.0.1:8787)
  HUB_REGION            run this region's environment of wrangler.toml (e.g. eu), with its own
                        state directory (.wrangler/state-<region>); unset: the default deployment
  DATABASE_URL          a Postgres to use instead of the embedded one
  ADMIN_TOKEN           the admin bearer token (default: generated once, kept in the state dir)
  WINGSMITH_STATE_DIR   where local state lives (default .wrangler/state, or .wrangler/state-<region>)
  ${'hub configuration, passed to the Worker: ' + hubConfigNames().join(', ')}`;

const CONFIG_PATH = path.join(REPO_ROOT, 'wrangler.toml');
const DEFAULT_PORT = 8787;
const DEFAULT_HOST = '127.0.0.1';

/** A failure with a message fit for the user as it stands: no stack trace. */
class StartError extends Error {}

function hubConfigNames(): string[] {
  // The names stay in one place (src/hub/config.ts); a region's own settings come from its
  // wrangler environment, not from the shell.
  return HUB_CONFIG_NAMES.filter((n) => !(REGION_VARS as readonly string[]).includes(n));
}

/**
 * The hub configuration the environment sets, checked here so a typo fails now, not per request:
 * with the region's own vars it runs beside (a hint outside the region's jurisdiction is only
 * wrong together with it).
 */
function hubVarsFromEnv(regionVars: Record<string, string> = {}): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const name of hubConfigNames()) {
    const value = process.env[name];
    if (value !== undefined && value !== '') vars[name] = value;
  }
  try {
    hubConfig({ ...regionVars, ...vars });
  } catch (err) {
    throw new StartError(errorText(err));
  }
  return vars;
}

function parsePort(raw: string | undefined): number {
  if (raw === undefined || raw === '') return DEFAULT_PORT;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new StartError(`PORT must be a TCP port number (1–65535), not ${JSON.stringify(raw)}`);
  return port;
}

/**
 * Fails while the port is still free to choose: workerd would otherwise die deep inside
 * wrangler with an error that names neither the port nor the fix.
 */
async function checkPortFree(host: string, port: number): Promise<void> {
  const problem = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    const server = net.createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(null)));
  });
  if (!problem) return;
  throw portError(host, port, problem);
}

function portError(host: string, port: number, err: NodeJS.ErrnoException): StartError {
  const next = port < 65_535 ? port + 1 : 8788;
  switch (err.code) {
    case 'EADDRINUSE':
      return new StartError(
        `port ${port} on ${host} is already in use (another npm start or wrangler dev?); choose another with PORT=${next} npm start`,
      );
    case 'EACCES':
      return new StartError(`not allowed to listen on port ${port} on ${host}; choose another with PORT=${next} npm start`);
    default:
      return new StartError(`cannot listen on ${host} port ${port} (check HOST and PORT): ${err.message}`);
  }
}

/** The address a client on this machine uses to reach a server bound to `host`. */
function clientOrigin(host: string, port: number): string {
  const reach = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${net.isIPv6(reach) ? `[${reach}]` : reach}:${port}`;
}

interface Database {
  embedded: boolean;
  databaseUrl: string;
  pgWsProxy: string | undefined;
  describe: string;
  migrationsApplied: number;
  close(): Promise<void>;
}

/** One line that says which database and what went wrong, never a driver stack trace. */
function databaseError(url: string | undefined, dataDir: string, err: unknown): StartError {
  let cause = errorText(err);
  if (url) {
    // Some causes already name the URL; once per line is enough.
    cause = cause.replace(` (${redactUrl(url)})`, '');
    return new StartError(`DATABASE_URL ${redactUrl(url)} is not usable: ${cause} (unset DATABASE_URL to use the embedded Postgres)`);
  }
  return new StartError(
    `the embedded Postgres in ${displayPath(dataDir)} failed: ${cause} ` +
      `(if an earlier start was killed while creating it, delete that directory and start again)`,
  );
}

async function prepareDatabase(url: string | undefined, dataDir: string): Promise<Database> {
  try {
    if (url && isNeonUrl(url)) {
      // Neon speaks the driver's WebSocket protocol itself; our plain-TCP proxy would only break
      // its TLS. The hub then runs without PG_WS_PROXY, as in production.
      const result = await migrate(url, undefined);
      return {
        embedded: false,
        databaseUrl: url,
        pgWsProxy: undefined,
        describe: redactUrl(url),
        migrationsApplied: result.applied.length,
        close: async () => undefined,
      };
    }
    if (!url) {
      const fresh = !existsSync(path.join(dataDir, 'PG_VERSION'));
      console.log(`start: starting the embedded Postgres in ${displayPath(dataDir)}${fresh ? ' (first start: initializing it takes ~10 s)' : ''}…`);
    }
    const stack = await startDevStack(url ? { databaseUrl: url, dataDir } : { dataDir });
    return {
      embedded: stack.embedded,
      databaseUrl: stack.databaseUrl,
      pgWsProxy: stack.pgWsProxy,
      describe: url ? redactUrl(url) : `embedded PGlite in ${displayPath(dataDir)}`,
      migrationsApplied: stack.migrations.applied.length,
      close: () => stack.close(),
    };
  } catch (err) {
    throw databaseError(url, dataDir, err);
  }
}

/** What /healthz says of the schema when the database answers (src/hub/db/schema-version.ts). */
const UnconfiguredSchema = z.object({ error: z.object({ code: z.literal('unconfigured'), message: z.string() }) });
const HealthSchema = z.object({ schema: z.enum(['ok', 'behind', 'missing']), schema_applied: z.string().nullable().optional(), schema_required: z.string().optional() });

/** The hub answers /healthz 200 once the Worker runs, reaches Postgres, and finds it migrated. */
async function waitHealthy(origin: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(5_000) });
      if (res.ok) return;
      const body: unknown = await res.json().catch(() => null);
      // A configuration the Worker refuses never becomes healthy: say so now, naming the var.
      const refused = UnconfiguredSchema.safeParse(body);
      if (refused.success) throw new StartError(`invalid hub configuration: ${refused.data.error.message}`);
      const schema = HealthSchema.safeParse(body);
      // An unreachable database's reason is not in the answer (it is public); the hub's log above says why.
      last =
        schema.success && schema.data.schema !== 'ok'
          ? `HTTP ${res.status}, the database is not migrated for this hub (schema ${schema.data.schema}, applied ${schema.data.schema_applied ?? 'none'}, required ${schema.data.schema_required}; npm run migrate)`
          : `HTTP ${res.status}${res.status === 503 ? ', the database is unavailable to the hub (its log says why)' : ''}`;
    } catch (err) {
      if (err instanceof StartError) throw err;
      last = errorText(err);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new StartError(`the hub started but is not healthy after ${timeoutMs / 1000} s (GET /healthz: ${last})`);
}

function printBanner(o: {
  origin: string;
  admin: AdminToken;
  demo: DemoCluster;
  database: Database;
  stateDir: string;
  adminTokenFile: string;
  sim: string;
  region: StartRegion | null;
}): void {
  const adminNote =
    o.admin.source === 'env' ? 'from ADMIN_TOKEN' : `kept in ${displayPath(o.adminTokenFile)}${o.admin.source === 'generated' ? ', new' : ''}`;
  const demoNote = { created: 'new cluster', reused: 'same as last start', rotated: 'rotated: the previous one no longer works' }[o.demo.action];
  const rule = '─'.repeat(78);
  const lines = [
    '',
    rule,
    '  Wingsmith Hub is running',
    '',
    `  Hub URL:       ${o.origin}`,
    `  Admin token:   ${o.admin.token}   (${adminNote})`,
    `  Demo cluster:  ${o.demo.name} (uid ${o.demo.uid})${o.demo.disabled ? '  ⚠ disabled: POST /admin/clusters/demo/enable to let it connect' : ''}`,
    `  Demo token:    ${o.demo.token}   (${demoNote})`,
    ...(o.region
      ? [
          `  Region:        ${o.region.name} (wrangler.toml [env.${o.region.name}]${
            o.region.jurisdiction ? `; Durable Objects in jurisdiction ${o.region.jurisdiction}, emulated locally` : ''
          })`,
        ]
      : []),
    `  Database:      ${o.database.describe}`,
    o.database.embedded
      ? `  State:         ${displayPath(o.stateDir)} (Postgres in pglite/, Durable Objects in v3/, tokens, logs/); to reset, stop and delete it`
      : `  State:         ${displayPath(o.stateDir)} (Durable Objects in v3/, tokens, logs/); the database above is reset separately`,
    `  Simulator:     ${o.sim}`,
    '',
    '  Connect a simulated cluster:',
    `    npm run sim -- --hub ${o.origin} --token ${o.demo.token}`,
    '  List clusters:',
    `    curl -H 'Authorization: Bearer ${o.admin.token}' ${o.origin}/admin/clusters`,
    '',
    '  Press Ctrl-C to stop.',
    rule,
    '',
  ];
  console.log(lines.join('\n'));
}

export async function runHub(): Promise<void> {
  let args: { sim: boolean; help: boolean };
  try {
    const { values } = parseArgs({ options: { sim: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true });
    args = { sim: values.sim === true, help: values.help === true };
  } catch (err) {
    console.error(`start: ${errorText(err)}\n\n${USAGE}`);
    process.exit(2);
  }
  if (args.help) {
    console.log(USAGE);
    // Explicitly: the supervisor's IPC channel would otherwise keep this process alive.
    process.exit(0);
  }
  const wantSim = args.sim || process.env.WINGSMITH_SIM === '1';

  // ---- Environment for wrangler, set before it is imported (it reads some at load).
  let regionName: string | null;
  try {
    regionName = requestedRegion(process.env);
  } catch (err) {
    console.error(`start: ${(err as Error).message}`);
    process.exit(1);
  }
  const stateDir = path.resolve(process.env.WINGSMITH_STATE_DIR || defaultStateDirFor(regionName));
  const paths = statePaths(stateDir);
  process.env.WRANGLER_SEND_METRICS = 'false';
  // No Request.cf fetch from Cloudflare: offline-safe and one warning fewer.
  process.env.CLOUDFLARE_CF_FETCH_ENABLED = 'false';
  // Wrangler appends every log line to a debug file; keep it with the rest of the local state.
  process.env.WRANGLER_LOG_PATH ??= paths.logs;
  // The Worker's console.log, which the hub's info-level JSON logs use, reaches the terminal only
  // at wrangler's "log" level, which also prints a table of bindings and other chatter at
  // startup. Wrangler reads WRANGLER_LOG at every message (when no dev.logLevel is given), so it
  // is "warn" while starting and stopping and "log" while serving. Starting at "warn" also
  // fixes the level of the runtime's own logger, created then, so the per-request lines
  // ("[wrangler:info] GET /… 200") stay off: the hub's JSON logs are the story. A WRANGLER_LOG
  // of the user's own (e.g. info, to see requests) is left alone.
  const quietWranglerByDefault = process.env.WRANGLER_LOG === undefined;
  if (quietWranglerByDefault) process.env.WRANGLER_LOG = 'warn';
  // Loading wrangler takes seconds; let it overlap the database's start. (A failure surfaces
  // where it is awaited; the catch only keeps it from counting as unhandled meanwhile.)
  const wranglerModule = import('wrangler');
  wranglerModule.catch(() => undefined);

  // ---- Lifecycle: everything started registers its stop; a stop request at any point stops
  // what exists, in reverse order, once the step in flight has finished (so an interrupted
  // first start never leaves a half-written Postgres data directory behind). Requests come from
  // the supervisor over IPC (see lib/supervise.ts), or as signals when run on its own.
  const cleanups: { what: string; run: () => Promise<void> }[] = [];
  let sim: SimChild | null = null;
  let stopRequested = false;
  let firstSignalAt = 0;
  let wakeStop: () => void = () => undefined;
  const stopSignal = new Promise<void>((resolve) => {
    wakeStop = resolve;
  });
  const requestStop = (why: string) => {
    if (stopRequested) return;
    stopRequested = true;
    console.error(`start: ${why}: stopping… (interrupt again to force)`);
    wakeStop();
  };
  const forceExit = () => {
    console.error('start: second interrupt: exiting without cleaning up');
    sim?.kill();
    process.exit(130);
  };
  const onSignal = (signal: NodeJS.Signals) => {
    const now = Date.now();
    if (!stopRequested) {
      firstSignalAt = now;
      requestStop(signal);
    } else if (now - firstSignalAt >= SAME_INTERRUPT_MS) {
      forceExit();
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('message', (m: unknown) => {
    if (!isSupervisorMessage(m)) return;
    if (m.type === 'stop') requestStop(m.signal);
    else forceExit();
  });
  // The supervisor gone (killed outright): nobody is left to forward a Ctrl-C, so stop now
  // rather than serve on as an orphan holding the port and the state directory.
  process.on('disconnect', () => requestStop('supervisor exited'));
  // A supervisor killed while this process was still loading (seconds: tsx, wrangler) closed the
  // channel before that listener existed, and Node told no one: this process went on to start
  // everything and served as an orphan holding the port. An IPC channel that is already closed
  // says the same. (Run on its own, with no channel, `process.send` is undefined.)
  if (process.send !== undefined && !process.connected) requestStop('supervisor exited');
  /**
   * Miniflare adds SIGINT/SIGTERM listeners that kill workerd and exit(130) at once, skipping
   * PGlite's clean close and the simulator's drain; signals here mean "stop cleanly".
   */
  const keepOnlyOwnSignalHandlers = () => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      for (const listener of process.listeners(signal)) if (listener !== onSignal) process.removeListener(signal, listener);
    }
  };

  const shutdown = async (code: number): Promise<never> => {
    // Wrangler's "Shutting down local server…" and the like are not news.
    if (quietWranglerByDefault) process.env.WRANGLER_LOG = 'warn';
    const overall = setTimeout(() => {
      console.error('start: shutdown is taking too long; exiting anyway');
      process.exit(code === 0 ? 1 : code);
    }, 30_000);
    overall.unref();
    for (const c of cleanups.reverse()) {
      try {
        await c.run();
      } catch (err) {
        console.error(`start: stopping ${c.what} failed: ${errorText(err)}`);
      }
    }
    process.exit(code);
  };

  try {
    // Before anything is created in the region's state directory: a mistyped region is one line.
    const region = regionName ? resolveRegion(await wranglerModule, CONFIG_PATH, regionName) : null;
    const host = process.env.HOST || DEFAULT_HOST;
    const port = parsePort(process.env.PORT);
    const hubVars = hubVarsFromEnv(region?.vars);
    const databaseUrlFromEnv = process.env.DATABASE_URL || undefined;

    let release: () => void;
    try {
      release = await lockStateDir(paths);
    } catch (err) {
      if (err instanceof StateLockedError) throw new StartError(err.message);
      throw err;
    }
    cleanups.push({ what: 'the state directory lock', run: async () => release() });

    await checkPortFree(host, port);
    const admin = await resolveAdminToken(paths, process.env.ADMIN_TOKEN || undefined);

    // A stop that came while this process was still loading: start no database it would wait for.
    if (stopRequested) return await shutdown(0);
    const database = await prepareDatabase(databaseUrlFromEnv, paths.pglite);
    cleanups.push({ what: 'the database', run: () => database.close() });
    console.log(
      `start: database ready (${database.describe}; ` +
        `${database.migrationsApplied ? `${database.migrationsApplied} migrations applied` : 'schema up to date'})`,
    );
    if (stopRequested) return await shutdown(0);

    // Checked again: the database can take seconds to come up, long enough for the port to go.
    await checkPortFree(host, port);
    const { unstable_startWorker } = await wranglerModule;
    const secret = (value: string) => ({ type: 'secret_text' as const, value });
    const plain = (value: string) => ({ type: 'plain_text' as const, value });
    const bindings: Record<string, { type: 'plain_text' | 'secret_text'; value: string }> = {
      // secret_text: wrangler shows these as "(hidden)" wherever it lists bindings.
      DATABASE_URL: secret(database.databaseUrl),
      ADMIN_TOKEN: secret(admin.token),
      ...(database.pgWsProxy ? { PG_WS_PROXY: plain(database.pgWsProxy) } : {}),
      ...Object.fromEntries(Object.entries(hubVars).map(([k, v]) => [k, plain(v)])),
      // Local workerd has no jurisdictions: emulate the region's (src/hub/region.ts).
      ...(region?.jurisdiction ? { HUB_JURISDICTION_EMULATION: plain('1') } : {}),
    };
    console.log(`start: starting the hub in workerd on ${clientOrigin(host, port)}…`);
    const worker = await unstable_startWorker({
      config: CONFIG_PATH,
      ...(region ? { env: region.name } : {}),
      sendMetrics: false,
      // Every binding comes from here (and wrangler.toml's [vars]); a stray .env or .dev.vars
      // in the tree must not quietly override DATABASE_URL or ADMIN_TOKEN.
      envFiles: NO_ENV_FILES,
      bindings,
      dev: {
        server: { hostname: host, port },
        inspector: false,
        persist: stateDir,
        watch: false,
      },
    });
    // Wrangler reports runtime failures (a port taken in the meantime, workerd dying) as
    // 'error' events, which would crash the process unheard, and leaves `ready` pending.
    let serving = false;
    // dispose() waits for `ready` before tearing down, so a hub that never started would hang the
    // stop until shutdown's limit; teardown() is the rest of dispose(), and its rejection only
    // repeats the start failure already reported.
    cleanups.push({ what: 'the hub (workerd)', run: () => (serving ? worker.dispose() : worker.raw.teardown().catch(() => undefined)) });
    let failStart: (err: Error) => void = () => undefined;
    const startFailure = new Promise<never>((_, reject) => {
      failStart = reject;
    });
    startFailure.catch(() => undefined);
    worker.raw.on('error', (err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      if (!serving) failStart(e);
      else console.error(`start: the hub's runtime reported an error: ${e.message}`);
    });
    try {
      await Promise.race([
        worker.ready,
        startFailure,
        new Promise<never>((_, reject) => setTimeout(() => reject(new StartError('workerd did not start within 60 s')), 60_000).unref()),
      ]);
      serving = true;
      keepOnlyOwnSignalHandlers();
      const url = await worker.url;
      if (Number(url.port) !== port) throw new StartError(`the hub came up on port ${url.port} instead of ${port}; is port ${port} taken?`);
    } catch (err) {
      if (err instanceof StartError) throw err;
      const e = err as NodeJS.ErrnoException;
      if (e.code === 'EADDRINUSE' || /EADDRINUSE|address already in use/i.test(e.message ?? '')) {
        throw portError(host, port, Object.assign(new Error(e.message), { code: 'EADDRINUSE' }));
      }
      throw new StartError(`the hub failed to start in workerd: ${e.message ?? String(err)}`);
    }
    const origin = clientOrigin(host, port);
    await waitHealthy(origin, 20_000);
    if (stopRequested) return await shutdown(0);

    let demo: DemoCluster;
    try {
      demo = await ensureDemoCluster(origin, admin.token, paths, DEMO_CLUSTER_NAME);
    } catch (err) {
      throw new StartError(`could not prepare the demo cluster: ${errorText(err)}`);
    }

    const simReady = wantSim && simAvailable();
    const simStatus = !wantSim
      ? 'off (npm start -- --sim, or WINGSMITH_SIM=1, runs one against the demo cluster)'
      : simReady
        ? `starting against ${demo.name}; its output is prefixed "sim │"`
        : 'unavailable: scripts/sim.ts does not exist in this checkout';
    printBanner({ origin, admin, demo, database, stateDir, adminTokenFile: paths.adminToken, sim: simStatus, region });
    if (quietWranglerByDefault) process.env.WRANGLER_LOG = 'log';

    // After the banner, so the simulator's first lines do not land in the middle of it.
    if (simReady) {
      sim = startSimChild(['--hub', origin, '--token', demo.token, '--cluster', demo.name], (code, signal) => {
        if (!stopRequested) console.error(`sim │ exited (${signal ?? `code ${code}`}); the hub keeps running`);
      });
      const child = sim;
      cleanups.push({ what: 'the simulated cluster', run: () => child.stop(8_000) });
    }

    await stopSignal;
    await shutdown(0);
  } catch (err) {
    if (err instanceof StartError || err instanceof RegionError) console.error(`start: ${err.message}`);
    else if (process.env.DEBUG) console.error('start: unexpected failure:', err);
    else console.error(`start: unexpected failure: ${errorText(err)} (DEBUG=1 shows the stack)`);
    await shutdown(1);
  }
}

