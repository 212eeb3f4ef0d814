/**
 * Runs `npm start`'s real work in a child process and turns interrupts into stop requests.
 *
 * Why not handle Ctrl-C in the process that runs the hub:
 * - `npm start` runs us under the tsx CLI, which relays each SIGINT it gets (npm forwards one
 *   more besides the terminal's) and SIGKILLs its child if the child has not acknowledged the
 *   signal within 30 ms. The hub's process often has its event loop busy for longer (PGlite is
 *   WASM on the main thread; wrangler bundles), and a SIGKILL there can leave a half-written
 *   Postgres data directory. This supervisor only waits, so it nearly always answers in time.
 * - Miniflare, once started, listens for SIGINT/SIGTERM itself and exits at once with 130.
 *
 * The child runs in its own process group (so the terminal's Ctrl-C reaches neither it nor
 * workerd) and gets the stop request over IPC. A second interrupt, later than the duplicate
 * deliveries of one keypress, asks it to exit at once; if even that does not end it, its whole
 * process group is killed.
 *
 * Should tsx kill this supervisor anyway (a machine so loaded that even an idle process misses
 * 30 ms), the child sees its IPC channel close and stops cleanly on its own; only the exit
 * status (130) and a second Ctrl-C's "force" are lost. Running start.ts with
 * `node --import tsx` instead of the tsx CLI avoids the relay altogether.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';

/** Messages from the supervisor to the hub process. */
export type SupervisorMessage = { type: 'stop'; signal: NodeJS.Signals } | { type: 'force' };

export function isSupervisorMessage(m: unknown): m is SupervisorMessage {
  const t = (m as { type?: unknown } | null)?.type;
  return t === 'stop' || t === 'force';
}

/** One terminal Ctrl-C can arrive two or three times (the process group's copy, npm's and tsx's relays). */
export const SAME_INTERRUPT_MS = 750;

export function supervise(script: string, roleEnv: string): Promise<never> {
  // The handlers go in before the child exists: the child shows in the process table as soon as
  // it is forked, and a Ctrl-C sent then (a test does, on seeing it) found no handler and killed
  // this process outright (exit by SIGINT, not 0). Caught now, it is handled once the spawn below
  // has returned: signals reach JavaScript from the event loop, never in the middle of it.
  let child: ChildProcess | null = null;
  const send = (m: SupervisorMessage) => {
    if (child?.connected) child.send(m, () => undefined);
  };
  const killGroup = () => {
    try {
      if (child?.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  };

  let firstAt = 0;
  let forced = false;
  const onSignal = (signal: NodeJS.Signals) => {
    const now = Date.now();
    if (firstAt === 0) {
      firstAt = now;
      send({ type: 'stop', signal });
      return;
    }
    if (forced || now - firstAt < SAME_INTERRUPT_MS) return;
    forced = true;
    send({ type: 'force' });
    setTimeout(() => {
      killGroup();
      process.exit(130);
    }, 3_000).unref();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const spawned = spawn(process.execPath, ['--import', 'tsx', script, ...process.argv.slice(2)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    detached: true,
    env: { ...process.env, [roleEnv]: 'hub' },
  });
  child = spawned;
  // Should this process die some other way, the child notices the IPC channel closing and stops.

  return new Promise<never>(() => {
    spawned.once('error', (err) => {
      console.error(`start: could not start the hub process: ${err.message}`);
      process.exit(1);
    });
    spawned.once('exit', (code, signal) => {
      // A child killed outright (kill -9, the OOM killer) stopped nothing; workerd, in its group,
      // would serve on as an orphan holding the port. After a clean stop the group is empty.
      killGroup();
      process.exit(code ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
    });
  });
}
