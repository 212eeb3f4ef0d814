/**
 * One operator process per state directory (src/operator/state-lock.ts): a second one is refused
 * at open, naming the holder; a lock its holder left behind by dying is taken over; and a holder
 * whose lock was taken over (it stalled past the staleness) writes the directory no more.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readlinkSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

// A seam to interleave a second process with this one's takeover at an exact point.
// And a disk that fills while the lock's holder is written into it.
const hooks = vi.hoisted(() => ({ beforeOpen: null as null | ((p: string) => Promise<void>), lockWriteFails: false }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const orig = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...orig,
    open: async (...args: Parameters<typeof orig.open>) => {
      const h = hooks.beforeOpen;
      if (h && String(args[0]).endsWith('.takeover')) {
        hooks.beforeOpen = null;
        await h(String(args[0]));
      }
      const fh = await orig.open(...args);
      if (hooks.lockWriteFails && String(args[0]).endsWith('operator.lock') && args[1] === 'wx') {
        hooks.lockWriteFails = false;
        Object.defineProperty(fh, 'writeFile', {
          value: async () => {
            throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
          },
        });
      }
      return fh;
    },
  };
});

import { openFileStores } from '../../../src/operator/file-stores';
import { StateDirLockedError, StateDirLostError } from '../../../src/operator/state-lock';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-lock-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const lockFile = () => path.join(dir, 'operator.lock');
/**
 * Unrefreshed for over ten stale periods of 60 s: stale at once, whatever the two hosts' clocks
 * (a lock only one to ten periods old is watched for a refresh first: the clock-skew tests below).
 */
const LONG_UNREFRESHED_MS = 11 * 60_000;
/** This process's pid namespace, as the lock records it (null off Linux). */
const PIDNS = (() => {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return null;
  }
})();
/** This kernel's boot id, as the lock records it (null off Linux). */
const BOOT = (() => {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    return null;
  }
})();
/**
 * A holder's lock file; `'unrecorded'`: written by an SDK before the lock named its namespace (or
 * its boot).
 */
const holder = (pid: number, host = hostname(), pidns: string | null = PIDNS, boot: string | null = BOOT) =>
  JSON.stringify({
    pid,
    host,
    token: 'other',
    since: '2026-12-04T00:00:00.000Z',
    ...(pidns === 'unrecorded' ? {} : { pidns }),
    ...(boot === 'unrecorded' ? {} : { boot }),
  });

/** Another operator process that opens the directory's stores and keeps them: resolves once it holds them. */
function holderProcess(): { child: ChildProcess; holding: Promise<void> } {
  const script = `import { openFileStores } from ${JSON.stringify(path.resolve('src/operator/file-stores.ts'))};
    await openFileStores(${JSON.stringify(dir)}); console.log('locked'); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  const holding = new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => d.toString().includes('locked') && resolve());
    child.on('exit', (code) => reject(new Error(`the holder exited (${code})`)));
  });
  return { child, holding };
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
}

/** A process that has exited: its pid names nobody (pids are not reused this soon). */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '0']);
  await new Promise((resolve) => child.on('exit', resolve));
  return child.pid as number;
}

describe('the state directory lock', () => {
  it('a second open of a directory in use is refused with StateDirLockedError naming the holder; closing the log gives the directory up', async () => {
    const first = await openFileStores(dir);
    const refused = await openFileStores(dir).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(StateDirLockedError);
    expect((refused as StateDirLockedError).holder).toMatchObject({ pid: process.pid, host: hostname() });
    expect((refused as Error).message).toMatch(/in use by pid \d+/);
    await first.outboundLog.close();
    const second = await openFileStores(dir);
    await second.outboundLog.close();
    expect(await readdir(dir)).not.toContain('operator.lock');
  });

  it('two opens of one directory at once in one process: one holds it, the other is refused (both used to succeed)', async () => {
    // Found by review: the check against this process's own holders ran before either had
    // finished, and the second then found the first's lock naming this pid, judged it stale (this
    // pid holds no lock here, by that check) and took it over: two clients writing one cursor.
    for (let round = 0; round < 10; round++) {
      const sub = path.join(dir, `s${round}`);
      const results = await Promise.allSettled([openFileStores(sub), openFileStores(sub)]);
      const held = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      const refused = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
      for (const h of held) await h.outboundLog.close();
      expect(held, `round ${round}`).toHaveLength(1);
      expect(refused[0]).toBeInstanceOf(StateDirLockedError);
    }
  });

  it('a second open in the same process through a symlinked spelling of the directory is refused too (it took over its own live lock, whose holder is this pid)', async () => {
    const real = path.join(dir, 'state');
    const link = path.join(dir, 'state-link');
    const first = await openFileStores(real);
    try {
      await symlink(real, link);
      const second = await openFileStores(link).catch((e: unknown) => e);
      if (!(second instanceof Error)) await (second as Awaited<ReturnType<typeof openFileStores>>).outboundLog.close();
      expect(second).toBeInstanceOf(StateDirLockedError);
    } finally {
      await first.outboundLog.close();
    }
  });

  it('another live process holding the directory keeps it: a real second operator process is refused while the first runs', async () => {
    const { child, holding } = holderProcess();
    try {
      await holding;
      const refused = await openFileStores(dir).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(StateDirLockedError);
      expect((refused as StateDirLockedError).holder?.pid).toBe(child.pid);
    } finally {
      await kill(child);
    }
    // Killed without releasing: its lock names a dead pid on this host, taken over at once.
    const after = await openFileStores(dir);
    await after.outboundLog.close();
  }, 30_000);

  it('a lock left by a dead process in this pid namespace, or by this very pid in an earlier life, is taken over', async () => {
    for (const pid of [await deadPid(), process.pid]) {
      await writeFile(lockFile(), holder(pid));
      const stores = await openFileStores(dir);
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid });
      await stores.outboundLog.close();
    }
  });

  it('a lock naming this host but another pid namespace (a container sharing the hostname and the volume, often pid 1 too) is kept while fresh, whatever its pid names here, and taken over once it has gone staleMs without a refresh', async () => {
    // Before, the same hostname and pid 1 on both sides read as this process's earlier life (or a
    // pid that runs no process here as a dead holder), and a live operator's lock was taken at once.
    const otherNs = PIDNS === 'pid:[4026531999]' ? 'pid:[4026531998]' : 'pid:[4026531999]';
    for (const [pid, pidns] of [[process.pid, otherNs], [await deadPid(), otherNs], [process.pid, 'unrecorded'], [await deadPid(), 'unrecorded']] as const) {
      await writeFile(lockFile(), holder(pid, hostname(), pidns));
      const refused = await openFileStores(dir, { lock: { staleMs: 60_000 } }).catch((e: unknown) => e);
      expect(refused, `pid ${pid} in namespace ${pidns}`).toBeInstanceOf(StateDirLockedError);
      const old = new Date(Date.now() - LONG_UNREFRESHED_MS);
      await utimes(lockFile(), old, old);
      const stores = await openFileStores(dir, { lock: { staleMs: 60_000 } });
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, pidns: PIDNS });
      await stores.outboundLog.close();
    }
  });

  it('a lock naming this host, this pid namespace and a dead or this very pid, but another boot (another machine with the same hostname and namespace name on a shared volume), is kept while fresh and taken over once it has gone staleMs without a refresh', async () => {
    // The namespace's name is an inode number unique only within one kernel's boot: the host's own
    // is the same on every Linux machine. Before, such a live lock was taken over at once.
    const otherBoot = BOOT === '00000000-0000-4000-8000-000000000000' ? '00000000-0000-4000-8000-000000000001' : '00000000-0000-4000-8000-000000000000';
    for (const [pid, boot] of [[process.pid, otherBoot], [await deadPid(), otherBoot], [process.pid, 'unrecorded']] as const) {
      await writeFile(lockFile(), holder(pid, hostname(), PIDNS, boot));
      const refused = await openFileStores(dir, { lock: { staleMs: 60_000 } }).catch((e: unknown) => e);
      expect(refused, `pid ${pid}, boot ${boot}`).toBeInstanceOf(StateDirLockedError);
      const old = new Date(Date.now() - LONG_UNREFRESHED_MS);
      await utimes(lockFile(), old, old);
      const stores = await openFileStores(dir, { lock: { staleMs: 60_000 } });
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, pidns: PIDNS, boot: BOOT });
      await stores.outboundLog.close();
    }
  });

  it('a lock naming a pid on this host that runs again as another process (reused after a reboot) is taken over once it has gone staleMs without a refresh', async () => {
    // The pid now names a process that is no operator and never refreshes the lock.
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)']);
    try {
      await writeFile(lockFile(), holder(other.pid as number));
      await expect(openFileStores(dir, { lock: { staleMs: 60_000 } })).rejects.toBeInstanceOf(StateDirLockedError);
      const old = new Date(Date.now() - LONG_UNREFRESHED_MS);
      await utimes(lockFile(), old, old);
      const stores = await openFileStores(dir, { lock: { staleMs: 60_000 } });
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid });
      await stores.outboundLog.close();
    } finally {
      await kill(other);
    }
  });

  it('a lock that could not be written (the disk was full) is not left behind: the next open, once there is room, takes the directory', async () => {
    hooks.lockWriteFails = true;
    await expect(openFileStores(dir)).rejects.toMatchObject({ code: 'ENOSPC' });
    // No process holds the directory; an empty lock file would refuse every open for staleMs,
    // telling the operator a holder it cannot read has it.
    const stores = await openFileStores(dir);
    expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid });
    await stores.outboundLog.close();
  });

  it('two processes finding the same dead holder: one takes the directory over, and the other, looking again under the takeover guard, is refused (both used to take it)', async () => {
    await writeFile(lockFile(), holder(await deadPid()));
    // This process has judged the dead holder stale; before it takes the guard, another process
    // that started at the same moment completes its own takeover.
    let other: ChildProcess | null = null;
    hooks.beforeOpen = async () => {
      const p = holderProcess();
      other = p.child;
      await p.holding;
    };
    try {
      const mine = await openFileStores(dir).catch((e: unknown) => e);
      expect(mine).toBeInstanceOf(StateDirLockedError);
      expect((mine as StateDirLockedError).holder?.pid).toBe((other as ChildProcess | null)?.pid);
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: (other as ChildProcess | null)?.pid });
    } finally {
      if (other) await kill(other);
    }
  }, 30_000);

  it('a lock from another host is kept while it is refreshed and taken over once it has gone unrefreshed for long', async () => {
    await writeFile(lockFile(), holder(1, 'another-node'));
    await expect(openFileStores(dir, { lock: { staleMs: 60_000 } })).rejects.toBeInstanceOf(StateDirLockedError);
    const old = new Date(Date.now() - LONG_UNREFRESHED_MS);
    await utimes(lockFile(), old, old);
    const stores = await openFileStores(dir, { lock: { staleMs: 60_000 } });
    // Taken over: the lock now names this process, not the other host's holder.
    expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, host: hostname() });
    await stores.outboundLog.close();
  });

  it('a live lock of another host whose clock is behind this one (its mtime older than staleMs by this clock) is watched, seen refreshed, and kept', async () => {
    // The holder's clock runs 1.6 stale periods behind: every refresh it makes already looks stale
    // here. Before, such a lock was taken over at once (two writers of one log and cursor).
    const staleMs = 600;
    await writeFile(lockFile(), holder(1, 'another-node'));
    const refreshAsBehind = async () => {
      const behind = new Date(Date.now() - 1.6 * staleMs);
      await utimes(lockFile(), behind, behind);
    };
    await refreshAsBehind();
    const refreshing = setInterval(() => void refreshAsBehind().catch(() => {}), staleMs / 3);
    try {
      const started = Date.now();
      await expect(openFileStores(dir, { lock: { staleMs } })).rejects.toBeInstanceOf(StateDirLockedError);
      // It watched before it answered, and the holder's lock is untouched.
      expect(Date.now() - started).toBeGreaterThanOrEqual(staleMs / 3 - 50);
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: 1, host: 'another-node' });
    } finally {
      clearInterval(refreshing);
    }
  });

  it('a lock of another host one to ten stale periods old and not refreshed while watched for staleMs is taken over; one older than ten periods at once', async () => {
    const staleMs = 600;
    await writeFile(lockFile(), holder(1, 'another-node'));
    const aged = async (periods: number) => {
      const at = new Date(Date.now() - periods * staleMs);
      await utimes(lockFile(), at, at);
    };
    await aged(1.6);
    let started = Date.now();
    let stores = await openFileStores(dir, { lock: { staleMs } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(staleMs - 50);
    expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, host: hostname() });
    await stores.outboundLog.close();

    await writeFile(lockFile(), holder(1, 'another-node'));
    await aged(11);
    started = Date.now();
    stores = await openFileStores(dir, { lock: { staleMs } });
    expect(Date.now() - started).toBeLessThan(staleMs);
    expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, host: hostname() });
    await stores.outboundLog.close();
  });

  it('a lock of another host released while it is watched is taken at once, not refused as held', async () => {
    const staleMs = 2_000;
    await writeFile(lockFile(), holder(1, 'another-node'));
    const at = new Date(Date.now() - 1.6 * staleMs);
    await utimes(lockFile(), at, at);
    // Its holder stops gracefully 200 ms into the watch.
    const release = setTimeout(() => void rm(lockFile(), { force: true }), 200);
    try {
      const started = Date.now();
      const stores = await openFileStores(dir, { lock: { staleMs } });
      expect(Date.now() - started).toBeLessThan(staleMs);
      expect(JSON.parse(await readFile(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid, host: hostname() });
      await stores.outboundLog.close();
    } finally {
      clearTimeout(release);
    }
  });

  it('the holder refreshes its lock, so another host does not take over a live one', async () => {
    const stores = await openFileStores(dir, { lock: { staleMs: 3_000 } });
    try {
      const old = new Date(Date.now() - 10_000);
      await utimes(lockFile(), old, old);
      await new Promise((resolve) => setTimeout(resolve, 1_300));
      expect(Date.now() - (await stat(lockFile())).mtimeMs).toBeLessThan(3_000);
    } finally {
      await stores.outboundLog.close();
    }
  });

  const frame = (seq: number) => {
    const text = JSON.stringify({ v: 1, type: 'node.observed', seq, payload: { n: seq } });
    return { seq, frame: text, bytes: Buffer.byteLength(text) };
  };
  const record = (cursor: number) => ({ version: 1 as const, sessionId: 's1', cursor, outbound: { nextSeq: 3, peerAck: 0, lostThrough: 0 }, clean: false, operations: [] });

  it('a holder whose lock another host took over writes neither file again (StateDirLostError), and leaves the new holder its lock', async () => {
    const { cursorStore, outboundLog } = await openFileStores(dir, { lock: { staleMs: 3_000 } });
    outboundLog.bindSession('s1');
    outboundLog.append(frame(1));
    await outboundLog.sync();
    await cursorStore.save(record(1));
    const files = async () => [await readFile(path.join(dir, 'outbound.log'), 'utf8'), await readFile(path.join(dir, 'cursor.json'), 'utf8')];
    const before = await files();
    // Another host judged the lock stale and took the directory over; this holder's refresh (every second) finds it.
    await writeFile(lockFile(), JSON.stringify({ pid: 1, host: 'another-node', token: 'theirs', since: new Date().toISOString() }));
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    outboundLog.append(frame(2));
    await expect(outboundLog.sync()).rejects.toBeInstanceOf(StateDirLostError);
    await expect(cursorStore.save(record(2))).rejects.toBeInstanceOf(StateDirLostError);
    await outboundLog.close();
    expect(await files()).toEqual(before);
    expect(JSON.parse(await readFile(lockFile(), 'utf8')).token).toBe('theirs');
  });

  it('a holder that stalled past half the staleness looks at the lock itself before it writes, before its refresh timer has run', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    try {
      const { outboundLog } = await openFileStores(dir, { lock: { staleMs: 3_000 } });
      outboundLog.bindSession('s1');
      outboundLog.append(frame(1));
      await outboundLog.sync();
      // A stall of 2 s (its refresh, due every second, has not run) during which another host took over.
      vi.setSystemTime(Date.now() + 2_000);
      await writeFile(lockFile(), JSON.stringify({ pid: 1, host: 'another-node', token: 'theirs', since: new Date().toISOString() }));
      outboundLog.append(frame(2));
      await expect(outboundLog.sync()).rejects.toBeInstanceOf(StateDirLostError);
      await outboundLog.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('temp files a crash left in the middle of an atomic write are removed at open; other files are not', async () => {
    const leftovers = ['cursor.json.tmp-123-4', 'outbound.log.tmp-99-1'];
    for (const f of [...leftovers, 'cluster.json', 'notes.tmp-1-1']) await writeFile(path.join(dir, f), 'x');
    const stores = await openFileStores(dir);
    const names = await readdir(dir);
    for (const f of leftovers) expect(names).not.toContain(f);
    expect(names).toEqual(expect.arrayContaining(['cluster.json', 'notes.tmp-1-1']));
    await stores.outboundLog.close();
  });
});
