/**
 * What `npm start` keeps between runs, all under one state directory (default
 * `.wrangler/state`, relocatable with WINGSMITH_STATE_DIR so tests and parallel hubs do not
 * share it):
 *
 *   pglite/        the embedded Postgres data directory
 *   v3/            workerd's Durable Object storage (wrangler appends `v3` to the persist path,
 *                  the same layout `wrangler dev` uses, so both see the same objects)
 *   admin-token    the generated ADMIN_TOKEN (not written when ADMIN_TOKEN is set)
 *   demo-token     the demo cluster's enrollment token and the registration it belongs to
 *   logs/          wrangler's debug log files
 *   start.lock     pid of the `npm start` using this directory
 */
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { processAlive } from '../../src/operator/state-lock';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const DEFAULT_STATE_DIR = path.join(REPO_ROOT, '.wrangler', 'state');

export interface StatePaths {
  root: string;
  pglite: string;
  adminToken: string;
  demoToken: string;
  logs: string;
  lock: string;
}

export function statePaths(root: string): StatePaths {
  return {
    root,
    pglite: path.join(root, 'pglite'),
    adminToken: path.join(root, 'admin-token'),
    demoToken: path.join(root, 'demo-token'),
    logs: path.join(root, 'logs'),
    lock: path.join(root, 'start.lock'),
  };
}

/** A path as a person would type it from the current directory. */
export function displayPath(p: string): string {
  const rel = path.relative(process.cwd(), p);
  return rel && !rel.startsWith('..') && !path.isAbsolute(rel) ? rel : p;
}

export class StateLockedError extends Error {
  constructor(
    readonly pid: number,
    readonly dir: string,
    lockFile: string,
  ) {
    // Named: where a process's start time cannot be read (no /proc), a process that reused the
    // pid of a killed hub looks like it, and only deleting the lock ends that.
    super(
      `another npm start (pid ${pid}) is using ${displayPath(dir)}; stop it first, ` +
        `or give this one its own directory with WINGSMITH_STATE_DIR=…; if no npm start is running, delete ${displayPath(lockFile)}`,
    );
  }
}

/**
 * Takes the state directory for this process. PGlite has no lock of its own (two processes on
 * one data directory corrupt it silently) and workerd's SQLite files are no better shared, so
 * the whole directory gets one pid file. A file whose process is gone is left over from a crash
 * and is taken over. The file names the process by its pid and, where the system says, its start
 * time: after a reboot or in a new container the pid is soon another process's, and a pid alone
 * would lock the directory out until someone deleted the file. Returns the release function;
 * release also runs on process exit.
 */
export async function lockStateDir(paths: StatePaths): Promise<() => void> {
  await mkdir(paths.root, { recursive: true });
  const mine = `${process.pid}${startTimeSuffix(process.pid)}`;
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(paths.lock, 'wx', 0o644);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
      const [pidText, started] = readFileSync(paths.lock, 'utf8').trim().split(/\s+/);
      const pid = Number(pidText);
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processAlive(pid) && sameProcess(pid, started)) throw new StateLockedError(pid, paths.root, paths.lock);
      unlinkSync(paths.lock);
      continue;
    }
    writeSync(fd, `${mine}\n`);
    closeSync(fd);
    break;
  }
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    try {
      // Only our own file: a crash-recovery takeover by another process must not be undone.
      if (readFileSync(paths.lock, 'utf8').trim() === mine) unlinkSync(paths.lock);
    } catch {
      // Already gone.
    }
  };
  process.once('exit', release);
  return release;
}

/** When the process started, in clock ticks since boot (Linux: /proc/<pid>/stat, field 22), or null. */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = fields[19];
    return ticks && /^\d+$/.test(ticks) ? ticks : null;
  } catch {
    return null;
  }
}

function startTimeSuffix(pid: number): string {
  const t = processStartTime(pid);
  return t === null ? '' : ` ${t}`;
}

/** The live `pid` is the process that wrote the lock: unknowable without a start time, so assumed. */
function sameProcess(pid: number, started: string | undefined): boolean {
  if (started === undefined) return true;
  const now = processStartTime(pid);
  return now === null || now === started;
}

/** Write a secret so that no other local user can read it, replacing the file atomically. */
async function writeSecret(file: string, text: string): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, file);
}

async function readOptional(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

export interface AdminToken {
  token: string;
  source: 'env' | 'file' | 'generated';
}

/**
 * ADMIN_TOKEN from the environment (never written to disk: it is the caller's secret), else the
 * one generated on an earlier start, else a new random one, kept so restarts do not invalidate
 * the curl commands and dashboards a developer already has open.
 */
export async function resolveAdminToken(paths: StatePaths, fromEnv: string | undefined): Promise<AdminToken> {
  if (fromEnv) return { token: fromEnv, source: 'env' };
  const stored = (await readOptional(paths.adminToken))?.trim();
  if (stored) return { token: stored, source: 'file' };
  // base64url: within the bearer token alphabet that Hono's bearerAuth accepts.
  const token = `wsadm_${randomBytes(32).toString('base64url')}`;
  await writeSecret(paths.adminToken, `${token}\n`);
  return { token, source: 'generated' };
}

/** The demo cluster's token and the registration it was issued for. */
export interface StoredDemoToken {
  uid: string;
  token: string;
  /** The cluster's `token_issued_at` when this token was issued: a later value means rotated. */
  token_issued_at: string;
}

export async function readDemoToken(paths: StatePaths): Promise<StoredDemoToken | null> {
  const text = await readOptional(paths.demoToken);
  if (!text) return null;
  try {
    const v = JSON.parse(text) as Partial<StoredDemoToken>;
    if (typeof v.uid === 'string' && typeof v.token === 'string' && typeof v.token_issued_at === 'string') {
      return { uid: v.uid, token: v.token, token_issued_at: v.token_issued_at };
    }
  } catch {
    // A damaged file only costs a rotation.
  }
  return null;
}

export async function writeDemoToken(paths: StatePaths, value: StoredDemoToken): Promise<void> {
  await writeSecret(paths.demoToken, `${JSON.stringify(value, null, 2)}\n`);
}
