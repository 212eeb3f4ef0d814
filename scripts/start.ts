/**
 * `npm start`: the whole hub on one machine, in one command.
 *
 *   Postgres      DATABASE_URL, else embedded PGlite kept in <state>/pglite
 *   proxy         the WebSocket→TCP proxy the Neon driver reaches a plain Postgres through
 *   migrations    applied before the hub serves
 *   hub           the Worker and its Durable Objects in workerd (wrangler's unstable_startWorker,
 *                 in this process), on 127.0.0.1:8787 unless PORT/HOST say otherwise, with its
 *                 Durable Object storage persisted under <state>
 *   demo cluster  registered (or reused) through the admin API; its token is printed
 *   --sim         optionally, scripts/sim.ts as a child connected with that token
 *
 * <state> is `.wrangler/state`, or WINGSMITH_STATE_DIR. Runs until SIGINT/SIGTERM, then stops
 * every part in reverse order and exits 0; a second interrupt exits at once.
 *
 * Two processes: this file first runs as a small supervisor that owns the terminal's signals
 * (lib/supervise.ts), and again, as its child, to do the work (lib/start-hub.ts).
 */
import { fileURLToPath } from 'node:url';

/** Set in the child that does the work; its absence means "be the supervisor". */
const ROLE_ENV = 'WINGSMITH_START_ROLE';

// Each role loads only what it needs: the supervisor stays small and idle, so it can always
// answer tsx's signal relay in time (see lib/supervise.ts).
if (process.env[ROLE_ENV] === 'hub') {
  // Not inherited by the simulator or anything else the hub process starts.
  delete process.env[ROLE_ENV];
  const { runHub } = await import('./lib/start-hub');
  await runHub();
} else {
  const { supervise } = await import('./lib/supervise');
  await supervise(fileURLToPath(import.meta.url), ROLE_ENV);
}
