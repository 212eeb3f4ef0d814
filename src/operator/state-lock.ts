/**
 * One process per state directory. Two operators sharing one (two replicas of a Deployment on
 * a ReadWriteMany volume, a second process started by hand) would number frames from the same
 * cursor and overwrite each other's log: each would resume a session the other had moved on,
 * which the hub can only read as gaps and duplicates. The lock makes the second one fail at
 * start, naming the holder, instead.
 *
 * A lock is a file created exclusively (`O_EXCL`), holding who took it. A holder refreshes its
 * mtime while it lives, so a lock whose holder vanished without releasing it (a crash, a killed
 * pod) is taken over: at once when the holder was a process in this pid namespace that no longer
 * runs, or this very pid, and after `staleMs` without a refresh when it was another host, whose
 * processes this one cannot see, another pid namespace (a container: one sharing this hostname and
 * volume is often pid 1 too, and its pid says nothing here), or a pid here that runs (another
 * process may have the number since the holder died).
 *
 * "Without a refresh" is measured on this host's clock: the mtime is the holder's, and a taker
 * whose clock ran ahead of the holder's by more than a refresh period read a live lock as stale.
 * A lock whose mtime is older than `staleMs` but not by many periods is watched for `staleMs`
 * first, and taken over only if no refresh came meanwhile (`unrefreshed`).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { open, readFile, realpath, stat, unlink, utimes } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import { fsyncDir } from './atomic-file';

export const DEFAULT_LOCK_STALE_MS = 60_000;
/**
 * A lock older than this many stale periods by this host's clock is stale without watching it: no
 * two hosts sharing a volume keep clocks ten minutes apart (at the default 60 s).
 */
const STALE_WITHOUT_WATCHING = 10;

// `pidns`: the holder's pid namespace, which its pid is a number in (absent from locks written
// before it was recorded, and null where the platform has none to read). `boot`: the holder's
// kernel boot id, which the namespace's name is unique within (absent from locks written before
// it was recorded, null where the platform has none to read).
const Holder = z.object({
  pid: z.number().int(),
  host: z.string(),
  token: z.string(),
  since: z.string(),
  pidns: z.string().nullable().optional(),
  boot: z.string().nullable().optional(),
});
type Holder = z.infer<typeof Holder>;

/** This process's pid namespace (Linux: /proc/self/ns/pid names it), null where none can be read. */
function readPidNamespace(): string | null {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return null;
  }
}
const PID_NAMESPACE = readPidNamespace();

/**
 * This kernel's boot id (Linux), null where none can be read. A pid namespace's name is an inode
 * number unique only within one running kernel: the host's own namespace has the same one on every
 * Linux machine, and containers on similar nodes are often given the same. Two machines with one
 * hostname on a shared volume (a StatefulSet pod recreated on another node while the old one runs
 * on a partitioned node; two hosts on one NFS share) matched on both, and a live lock was taken
 * over at once as a dead process's.
 */
function readBootId(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    return null;
  }
}
const BOOT_ID = readBootId();

/** The state directory belongs to another live process. */
export class StateDirLockedError extends Error {
  constructor(
    readonly lockPath: string,
    readonly holder: Holder | null,
  ) {
    super(
      holder
        ? `state directory is in use by pid ${holder.pid} on ${holder.host} since ${holder.since} (${lockPath}); one operator process per state directory`
        : `state directory is locked (${lockPath}) by a holder that could not be read; remove the file if no operator uses the directory`,
    );
    this.name = 'StateDirLockedError';
  }
}

/**
 * This process held the state directory and holds it no more: another process took the lock over
 * (it judged it stale: this one stalled, or its refreshes failed, for longer than `staleMs`), or
 * the lock could not be refreshed for that long. Nothing more may be written there: the other
 * process numbers frames from the same files.
 */
export class StateDirLostError extends Error {
  constructor(
    readonly lockPath: string,
    readonly holder: Holder | null,
    why: string,
  ) {
    super(`the state directory is no longer this process's (${lockPath}): ${why}; stopping without writing to it`);
    this.name = 'StateDirLostError';
  }
}

export interface StateLockOptions {
  /** A lock not refreshed for this long, taken by another host, is taken over. Default 60 s. */
  staleMs?: number;
}

/** Locks this process holds, by path: a second open in the same process is refused too. */
const held = new Map<string, StateLock>();
/**
 * Paths an open in this process is taking now: a second open meanwhile would find the first's
 * lock naming this pid, held by no one here yet, judge it stale and take it over.
 */
const opening = new Set<string>();

export class StateLock {
  private timer: ReturnType<typeof setInterval> | null = null;
  private released = false;
  private lost: StateDirLostError | null = null;
  /** When the lock was last seen ours and its mtime refreshed. */
  private refreshedAt = Date.now();

  private constructor(
    readonly path: string,
    private readonly token: string,
    private readonly staleMs: number,
  ) {
    held.set(path, this);
    // A third of the stale time: two refreshes may fail before another host may take over.
    this.timer = setInterval(() => void this.refresh(), Math.max(1_000, Math.floor(staleMs / 3)));
    this.timer.unref();
  }

  static async acquire(where: string, options: StateLockOptions = {}): Promise<StateLock> {
    // One key per file, however it is spelt (relative, absolute, through a symlink): `held` is what
    // refuses a second open in this process, where the holder's pid is this one's.
    const path = await canonical(where);
    const staleMs = options.staleMs ?? DEFAULT_LOCK_STALE_MS;
    if (held.has(path) || opening.has(path)) throw new StateDirLockedError(path, await readHolder(path));
    opening.add(path);
    try {
      return await StateLock.take(path, staleMs);
    } finally {
      opening.delete(path);
    }
  }

  private static async take(path: string, staleMs: number): Promise<StateLock> {
    // Two attempts: a stale lock removed on the first is created on the second; losing that race
    // to another process is a live holder, refused.
    for (let attempt = 0; ; attempt++) {
      const token = randomUUID();
      const me: Holder = { pid: process.pid, host: hostname(), token, since: new Date().toISOString(), pidns: PID_NAMESPACE, boot: BOOT_ID };
      let created = false;
      try {
        const fh = await open(path, 'wx', 0o600);
        created = true;
        try {
          await fh.writeFile(JSON.stringify(me));
          await fh.sync();
        } finally {
          await fh.close();
        }
        await fsyncDir(dirname(path));
        return new StateLock(path, token, staleMs);
      } catch (err) {
        // A lock this open created and could not finish (ENOSPC, EIO) names no holder: left
        // behind, it would refuse every open for staleMs as held by one that cannot be read.
        if (created) await unlink(path).catch(() => {});
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = await readHolder(path);
      const verdict = attempt > 0 ? null : await judgeStale(path, holder, staleMs);
      // Released while it was judged (its holder stopped while the lock was watched): created
      // again, and refused if another process got there first.
      if (verdict?.stale === 'gone') continue;
      if (verdict?.stale !== true) throw new StateDirLockedError(path, holder);
      // Two processes may find the same dead holder: check-then-unlink alone would let the second
      // unlink the lock the first just took. The takeover runs under a guard file, and looks again
      // under it: only the holder it judged stale is removed, and only if the lock was not
      // refreshed since (not watched again: the guard is another taker's to break after 10 s).
      await underTakeoverGuard(path, async () => {
        const now = await readHolder(path);
        if (now?.token !== holder?.token || (await mtimeOf(path)) !== verdict.mtimeMs) throw new StateDirLockedError(path, now);
        await unlink(path).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err;
        });
      });
    }
  }

  /**
   * What a crash does to the lock held on `path`: nothing refreshes it any more and this process
   * forgets it, but the file stays, naming this pid. For simulating a crash and restart within one
   * process (the restart finds its own pid, as a container restarted as pid 1 does).
   */
  static abandon(path: string): void {
    const lock = held.get(canonicalSync(path));
    if (!lock) return;
    lock.released = true;
    if (lock.timer) clearInterval(lock.timer);
    lock.timer = null;
    held.delete(lock.path);
  }

  /** Give the directory up: the lock file goes if it is still this holder's. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (held.get(this.path) === this) held.delete(this.path);
    if ((await readHolder(this.path))?.token === this.token) await unlink(this.path).catch(() => {});
  }

  /**
   * Throws `StateDirLostError` once the directory is not this process's any more; called before
   * every write to it. A process whose refresh is overdue (it stalled: a pause, a frozen VM) looks
   * at the lock file itself first, since the timer that would have found it taken over may not
   * have run yet.
   */
  check(): void {
    if (this.lost) throw this.lost;
    if (this.released || Date.now() - this.refreshedAt < this.staleMs / 2) return;
    let holder: Holder | null | 'unreadable';
    try {
      holder = parseHolder(readFileSync(this.path, 'utf8'));
    } catch (err) {
      holder = unreadable(err);
    }
    this.judge(holder);
    if (this.lost) throw this.lost;
  }

  private async refresh(): Promise<void> {
    if (this.released || this.lost) return;
    let holder: Holder | null | 'unreadable';
    try {
      holder = parseHolder(await readFile(this.path, 'utf8'));
    } catch (err) {
      holder = unreadable(err);
    }
    // Only a lock that is still ours: one taken over while this process stalled is the other's.
    if (!this.judge(holder)) return;
    const now = new Date();
    try {
      await utimes(this.path, now, now);
      this.refreshedAt = now.getTime();
    } catch {
      this.judge('unreadable');
    }
  }

  /**
   * Whether the lock, as read, is still ours; sets `lost` when it is not. A file naming another
   * holder, or gone or replaced (this process never rewrites its own), is lost at once; one that
   * could not be read or refreshed only when that has lasted `staleMs`, after which another host
   * may take it over.
   */
  private judge(holder: Holder | null | 'unreadable'): boolean {
    if (holder !== 'unreadable' && holder?.token === this.token) return true;
    if (holder === 'unreadable') {
      if (Date.now() - this.refreshedAt <= this.staleMs) return false;
      this.lost ??= new StateDirLostError(this.path, null, `its lock could not be read or refreshed for over ${this.staleMs} ms`);
    } else {
      this.lost ??= new StateDirLostError(this.path, holder, holder ? `pid ${holder.pid} on ${holder.host} took its lock over` : 'its lock file was removed or replaced');
    }
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    return false;
  }
}

/** The lock file's path with its directory's symlinks resolved (as given when the directory is missing). */
async function canonical(where: string): Promise<string> {
  const p = resolve(where);
  return realpath(dirname(p)).then((d) => join(d, basename(p)), () => p);
}

function canonicalSync(where: string): string {
  const p = resolve(where);
  try {
    return join(realpathSync(dirname(p)), basename(p));
  } catch {
    return p;
  }
}

/** A takeover guard older than this was left by a process that died taking over. */
const GUARD_STALE_MS = 10_000;

/** Run `fn` holding `<lock>.takeover` (created exclusively); another takeover meanwhile is refused. */
async function underTakeoverGuard(path: string, fn: () => Promise<void>): Promise<void> {
  const guard = `${path}.takeover`;
  const take = () => open(guard, 'wx', 0o600);
  let fh;
  try {
    fh = await take();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const age = await stat(guard).then((s) => Date.now() - s.mtimeMs, () => 0);
    if (age <= GUARD_STALE_MS) throw new StateDirLockedError(path, await readHolder(path));
    await unlink(guard).catch(() => {});
    fh = await take().catch(async (e: NodeJS.ErrnoException) => {
      if (e.code === 'EEXIST') throw new StateDirLockedError(path, await readHolder(path));
      throw e;
    });
  }
  await fh.close();
  try {
    await fn();
  } finally {
    await unlink(guard).catch(() => {});
  }
}

async function readHolder(path: string): Promise<Holder | null> {
  try {
    return parseHolder(await readFile(path, 'utf8'));
  } catch {
    return null;
  }
}

/** A lock file that could not be read: gone (null: another may create it), or unreadable for now. */
function unreadable(err: unknown): null | 'unreadable' {
  return (err as NodeJS.ErrnoException).code === 'ENOENT' ? null : 'unreadable';
}

function parseHolder(text: string): Holder | null {
  try {
    const parsed = Holder.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The lock file's mtime; null when it cannot be read (gone). */
async function mtimeOf(path: string): Promise<number | null> {
  try {
    return (await stat(path)).mtimeMs;
  } catch {
    return null;
  }
}

/** Whether the lock is stale, and the mtime it had when judged (compared again under the takeover guard). */
async function judgeStale(path: string, holder: Holder | null, staleMs: number): Promise<{ stale: boolean | 'gone'; mtimeMs: number | null }> {
  // A pid means something only in the namespace it was numbered in. A hostname does not name one:
  // containers share theirs (a pod's containers, hostNetwork pods on one node, a StatefulSet pod
  // recreated while the old one still runs on a partitioned node), each with its own namespace and
  // often pid 1, so a live holder there looked like this process's earlier life and was taken
  // over at once. The namespace's name is unique only within one boot of one kernel (readBootId).
  // A lock without a namespace or a boot id (an older SDK's) is judged by its age too.
  if (
    holder &&
    holder.host === hostname() &&
    holder.pidns !== undefined &&
    holder.pidns === PID_NAMESPACE &&
    holder.boot !== undefined &&
    holder.boot === BOOT_ID
  ) {
    // This pid is this process, which holds no lock here (`held`): a previous life of the same
    // pid left it.
    if (holder.pid === process.pid || !processAlive(holder.pid)) {
      const mtimeMs = await mtimeOf(path);
      return { stale: mtimeMs === null ? 'gone' : true, mtimeMs };
    }
    // The pid runs, but it may be another process's now (pids are reused: after a reboot a
    // system daemon can hold the dead holder's number): a live holder refreshes its lock, so one
    // unrefreshed for staleMs is judged as another host's would be, or it would be refused forever.
  }
  // Another host (or a file no holder wrote whole): only its age tells.
  const mtimeMs = await mtimeOf(path);
  return { stale: await unrefreshed(path, mtimeMs, staleMs), mtimeMs };
}

/**
 * Whether the lock went `staleMs` without a refresh, on this host's clock ('gone': released
 * meanwhile). Its mtime is the holder's clock: fresh by it, the lock is live; older by many
 * periods, it is stale whatever the two clocks say; in between, a live holder refreshes it within
 * a third of `staleMs`, so it is watched that long and more.
 */
async function unrefreshed(path: string, mtimeMs: number | null, staleMs: number): Promise<boolean | 'gone'> {
  if (mtimeMs === null) return 'gone';
  const age = Date.now() - mtimeMs;
  if (age <= staleMs) return false;
  if (age > STALE_WITHOUT_WATCHING * staleMs) return true;
  const until = Date.now() + staleMs;
  const step = Math.max(10, Math.min(1_000, Math.floor(staleMs / 20)));
  while (Date.now() < until) {
    await new Promise((r) => setTimeout(r, Math.min(step, until - Date.now())));
    const now = await mtimeOf(path);
    if (now === null) return 'gone';
    // Refreshed, or replaced by another taker: live either way.
    if (now !== mtimeMs) return false;
  }
  return true;
}

/** Whether a process with this pid runs on this host (as any user). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the pid runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

