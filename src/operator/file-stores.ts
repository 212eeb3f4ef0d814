import { mkdir, readdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import { FileCursorStore } from './cursor-store';
import { FileOutboundLog, type FileOutboundLogOptions } from './outbound-log';
import { StateLock, type StateLockOptions } from './state-lock';

const CURSOR = 'cursor.json';
const LOG = 'outbound.log';
const LOCK = 'operator.lock';
/** What a crash in the middle of `writeFileAtomic` leaves of our two files. */
const LEFTOVER = new RegExp(`^(?:${CURSOR.replace('.', '\\.')}|${LOG.replace('.', '\\.')})\\.tmp-\\d+-\\d+$`);

/** A simulated crash's effect on the directory's lock (see `StateLock.abandon`); tests only. */
export function abandonFileStoresLock(dir: string): void {
  StateLock.abandon(path.join(dir, LOCK));
}

export type FileStoresOptions = FileOutboundLogOptions & { lock?: StateLockOptions };

/**
 * The durable pair an operator keeps in one directory beside its cluster state:
 * `cursor.json` (session, cursor, numbering, operations) and `outbound.log` (sent frames until
 * acknowledged). Both or neither: a cursor without its log would say lossy after every crash.
 *
 * The directory is this process's alone while the log is open (`operator.lock`, see
 * state-lock.ts): a second process fails to open it with `StateDirLockedError`, and stopping the
 * client (which closes the log) gives it up. A process whose lock another one took over (it
 * stalled past the lock's staleness) writes neither file again: each write fails with
 * `StateDirLostError`, and the client stops.
 */
export async function openFileStores(
  dir: string,
  options: FileStoresOptions = {},
): Promise<{ cursorStore: FileCursorStore; outboundLog: FileOutboundLog }> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const { lock: lockOptions, ...logOptions } = options;
  const lock = await StateLock.acquire(path.join(dir, LOCK), lockOptions);
  try {
    // Only the lock's holder may: another process's temp file may be mid-write.
    for (const name of await readdir(dir)) {
      if (LEFTOVER.test(name)) await unlink(path.join(dir, name)).catch(() => {});
    }
    // Every write checks the lock is still this process's: one taken over (this process stalled
    // past its staleness) must not be written beside its new holder (StateDirLostError).
    const guard = () => lock.check();
    return {
      cursorStore: new FileCursorStore(path.join(dir, CURSOR), undefined, guard),
      outboundLog: await FileOutboundLog.open(path.join(dir, LOG), { ...logOptions, afterClose: () => lock.release(), guard }),
    };
  } catch (err) {
    await lock.release();
    throw err;
  }
}
