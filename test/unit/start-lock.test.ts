/**
 * `npm start`'s lock on its state directory (scripts/lib/start-state.ts): a lock left by a crash
 * is taken over, a live holder is refused. After a reboot or in a new container a pid is soon
 * another process's: the lock names its process by pid and start time, so a stale lock whose pid
 * a stranger now has is taken over instead of locking `npm start` out until the file is deleted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lockStateDir, processStartTime, StateLockedError, statePaths } from '../../scripts/lib/start-state';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

async function scratch() {
  const dir = await mkdtemp(path.join(tmpdir(), 'start-lock-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  return statePaths(dir);
}

/** Another live process (standing in for a stranger, or for a running `npm start`). */
async function stranger(): Promise<ChildProcess & { pid: number }> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  cleanup.push(() => void child.kill('SIGKILL'));
  await new Promise((r) => child.once('spawn', r));
  return child as ChildProcess & { pid: number };
}

describe.runIf(processStartTime(process.pid) !== null)('npm start state directory lock', () => {
  it('takes over a lock whose pid is now another process (its start time differs), and releases only its own', async () => {
    const paths = await scratch();
    const other = await stranger();
    await writeFile(paths.lock, `${other.pid} 1\n`);
    const release = await lockStateDir(paths);
    expect((await readFile(paths.lock, 'utf8')).split(/\s+/)[0]).toBe(String(process.pid));
    release();
    await expect(readFile(paths.lock, 'utf8')).rejects.toThrow();
  });

  it('refuses a lock held by the live process that wrote it', async () => {
    const paths = await scratch();
    const other = await stranger();
    await writeFile(paths.lock, `${other.pid} ${processStartTime(other.pid)}\n`);
    await expect(lockStateDir(paths)).rejects.toBeInstanceOf(StateLockedError);
    // A lock from before start times were written (a pid alone) is still honoured while it runs.
    await writeFile(paths.lock, `${other.pid}\n`);
    await expect(lockStateDir(paths)).rejects.toBeInstanceOf(StateLockedError);
  });
});
