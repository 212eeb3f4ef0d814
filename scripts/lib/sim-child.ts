/**
 * The optional simulated cluster `npm start -- --sim` runs beside the hub: a thin wrapper around
 * `scripts/sim.ts` as a child process, its output prefixed so it reads apart from the hub's logs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { REPO_ROOT } from './start-state';

export const SIM_SCRIPT = path.join(REPO_ROOT, 'scripts', 'sim.ts');

export interface SimChild {
  pid: number | undefined;
  /** Graceful stop (SIGTERM, which the simulator drains on), then SIGKILL after `graceMs`. */
  stop(graceMs: number): Promise<void>;
  /** Immediate SIGKILL, for a forced exit. */
  kill(): void;
}

export function simAvailable(): boolean {
  return existsSync(SIM_SCRIPT);
}

export function startSimChild(args: string[], onExit: (code: number | null, signal: NodeJS.Signals | null) => void): SimChild {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', SIM_SCRIPT, ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group: a terminal Ctrl-C reaches only us, and we send it exactly one
    // signal. Otherwise it would see the terminal's SIGINT and ours, and take the second for
    // "stop now, without draining".
    detached: true,
    env: process.env,
  });
  let exited = false;
  const done = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = true;
      onExit(code, signal);
      resolve();
    });
    // A spawn failure emits 'error' and, for a process that never started, no 'exit'.
    child.once('error', (err) => {
      if (exited) return;
      exited = true;
      console.error(`sim │ could not start: ${err.message}`);
      onExit(null, null);
      resolve();
    });
  });
  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    const out = stream === child.stdout ? process.stdout : process.stderr;
    createInterface({ input: stream }).on('line', (line) => out.write(`sim │ ${line}\n`));
  }
  return {
    pid: child.pid,
    stop: async (graceMs) => {
      if (exited) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await done;
      clearTimeout(timer);
    },
    kill: () => {
      if (!exited) child.kill('SIGKILL');
    },
  };
}
