import { open, rename, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';

/** Test seams for crash simulation; production passes none. */
export interface AtomicWriteHooks {
  /** Runs after the temp file is written and fsynced, before the rename. Throw to "crash" there. */
  afterTempWrite?: (tempPath: string) => void | Promise<void>;
}

let counter = 0;

/**
 * Replace a file so that a crash at any instant leaves either the old or the new content whole:
 * write a temp file beside it, fsync it, rename it over the target (atomic within a directory),
 * then fsync the directory so the rename itself survives a power loss.
 */
export async function writeFileAtomic(target: string, data: string | Uint8Array, hooks?: AtomicWriteHooks): Promise<void> {
  const temp = `${target}.tmp-${process.pid}-${++counter}`;
  const fh = await open(temp, 'w', 0o600);
  try {
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await hooks?.afterTempWrite?.(temp);
    await rename(temp, target);
  } catch (err) {
    // A real crash would leave the temp file behind; a thrown error cleans up after itself. Also
    // when the write itself failed: a partial temp file left by ENOSPC holds the very space a
    // retry (with a new temp name each time) needs.
    if (!hooks?.afterTempWrite) await unlink(temp).catch(() => {});
    throw err;
  }
  await fsyncDir(path.dirname(target));
}

/** Make a directory entry change (create, rename) durable. */
export async function fsyncDir(dir: string): Promise<void> {
  let fh;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch (err) {
    // Some platforms refuse fsync on a directory (EISDIR/EPERM/EINVAL); the rename is still atomic there.
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EISDIR' && code !== 'EPERM' && code !== 'EINVAL' && code !== 'EBADF') throw err;
  } finally {
    await fh?.close();
  }
}

/**
 * Write every byte or throw. A write(2) the disk cuts short (it filled part-way) is no error: the
 * handle reports the bytes written, and a batch whose commit line is missing was never durable.
 * The next write reports why (ENOSPC, EIO).
 */
export async function writeAll(fh: FileHandle, bytes: Buffer): Promise<void> {
  for (let off = 0; off < bytes.length; ) {
    const { bytesWritten } = await fh.write(bytes, off, bytes.length - off);
    if (!(bytesWritten > 0)) throw new Error(`a write stored nothing at byte ${off} of ${bytes.length}`);
    off += bytesWritten;
  }
}
