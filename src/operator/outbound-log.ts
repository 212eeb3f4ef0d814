/**
 * The operator's outbound replay buffer, optionally durable.
 *
 * Choice: the SDK ships both. `MemoryOutboundLog` keeps sent frames in memory only; after a
 * crash it cannot prove what it sent, so the operator says `lossy: true` and gets a fresh
 * session (a graceful stop drains acks first, so a clean restart still resumes).
 * `FileOutboundLog` is an append-only file of sent frames, group-committed: the SDK appends a
 * batch, calls `sync()` (one write and one fdatasync for the whole batch) and only then writes
 * the batch to the socket. Every frame the hub can ever have seen is therefore on disk, and a
 * crashed operator resumes with `lossy: false` and replays exactly what was unacknowledged.
 *
 * File format, one record per line, each with a CRC-32 so a torn or rotted record is detected:
 *
 *     H <crc> {"v":1,"session":"…","released":N,"sent":M}   header: whose frames, released through N
 *     F <seq> <crc> <frame text>                       one sent frame, its original text
 *     C <seq> <crc>                                    commit: the batch ending at <seq> is durable
 *
 * Only committed batches count. A batch is committed by the same fdatasync that precedes its
 * socket write, so anything after the last valid commit (a truncated last record, a batch cut
 * by the crash) was never sent and is discarded. A bad record *before* a valid commit is real
 * corruption: the log cannot vouch for what it sent and recovery reports it not intact (→ lossy).
 * Acknowledged frames are released in memory at once and dropped from the file by compaction
 * (rewrite the live tail atomically) once the dead prefix outweighs the live part.
 */
import { open, readFile, type FileHandle } from 'node:fs/promises';
import { z } from 'zod';
import { MemoryReplayStore, type ReplayEntry, type ReplayStore } from '../protocol';
import { writeAll, writeFileAtomic } from './atomic-file';
import { crc32Hex } from './crc32';

/** What opening a log found on disk. */
export interface LogRecovery {
  /** The session whose frames the log holds; null for a new or empty log. */
  session: string | null;
  /** Every committed record is readable and the committed seqs are contiguous. */
  intact: boolean;
  /** Why the log is not intact, or what was discarded from its tail. */
  problem: string | null;
  /** Frames with seq ≤ this were acknowledged before the last compaction. */
  released: number;
  /** Highest committed seq (0 when none). */
  lastSeq: number;
  /** The first frames were pushed out by overflow: resume below this is impossible. */
  lostThrough: number;
  /** Uncommitted bytes cut from the tail (a crash mid-batch). */
  discardedBytes: number;
}

export interface OutboundLog extends ReplayStore {
  /** Whether `sync()` makes appended frames survive a crash. */
  readonly durable: boolean;
  readonly recovery: LogRecovery;
  /** After `clear()` for a fresh session: the session the next frames belong to. */
  bindSession(sessionId: string): void;
  /** Make everything appended so far durable; resolve only then. */
  sync(): Promise<void>;
  /**
   * `dropUnsynced`: frames appended and never synced (so never written to the socket) are left out
   * of the file. The client asks for it when its last save of the durable record failed: such
   * frames may carry acks and conclusions the record on disk does not have.
   */
  close(options?: { dropUnsynced?: boolean }): Promise<void>;
}

const NO_RECOVERY: LogRecovery = {
  session: null,
  intact: true,
  problem: null,
  released: 0,
  lastSeq: 0,
  lostThrough: 0,
  discardedBytes: 0,
};

/** Frames in memory only: a crash loses them, which the SDK reports as `lossy`. */
export class MemoryOutboundLog extends MemoryReplayStore implements OutboundLog {
  readonly durable = false;
  readonly recovery: LogRecovery = NO_RECOVERY;
  bindSession(): void {}
  async sync(): Promise<void> {}
  async close(): Promise<void> {}
}

const Header = z.object({
  v: z.literal(1),
  session: z.string().min(1).max(128).nullable(),
  released: z.number().int().nonnegative(),
  /** Highest seq ever appended when the header was written (so numbering never reuses one). */
  sent: z.number().int().nonnegative(),
});

const NL = 0x0a;

export interface FileOutboundLogOptions {
  /** Compact once the file is at least this big and mostly released frames. Default 4 MiB. */
  compactAtBytes?: number;
  /** Runs once the log is closed (the state directory's lock is released here). */
  afterClose?: () => Promise<void>;
  /** Runs before every write to the file; throws when it may not be written any more (the directory's lock was lost). */
  guard?: () => void;
}

export class FileOutboundLog implements OutboundLog {
  readonly durable = true;
  private readonly mem = new MemoryReplayStore();
  private pending: string[] = [];
  private pendingLast = 0;
  /** Highest seq ever appended, including frames since released or pushed out. */
  private highest: number;
  /** Highest seq a completed sync made durable (the file's last commit): past it, nothing was sent. */
  private synced: number;
  private released: number;
  private session: string | null;
  private rewriteNeeded = false;
  /**
   * Bumped by `clear()` and `bindSession()`: a rewrite already on its way to the disk carries the
   * layout from before them, so it must leave the next sync to rewrite again.
   */
  private layout = 0;
  /** Acknowledged frames are still in the file (released since the last rewrite). */
  private releasedInFile = false;
  private fileBytes: number;
  private fh: FileHandle | null;
  /** `close()` was called: no sync may reopen the file. */
  private closed = false;
  private chain: Promise<void> = Promise.resolve();
  private readonly compactAtBytes: number;
  private readonly afterClose: (() => Promise<void>) | undefined;
  private readonly guard: () => void;

  private constructor(
    readonly path: string,
    readonly recovery: LogRecovery,
    entries: ReplayEntry[],
    fh: FileHandle,
    fileBytes: number,
    options: FileOutboundLogOptions,
  ) {
    for (const e of entries) this.mem.append(e);
    this.released = recovery.released;
    this.highest = recovery.lastSeq;
    this.synced = recovery.lastSeq;
    // A log that cannot vouch for itself holds its session's frames no more (recovery kept none):
    // its rewrite must not write a header vouching for that session, as `clear()` does not, or a
    // close before the client restored (and cleared) it would make the damaged log resumable.
    this.session = recovery.intact ? recovery.session : null;
    this.fh = fh;
    this.fileBytes = fileBytes;
    this.compactAtBytes = options.compactAtBytes ?? 4 * 1024 * 1024;
    this.afterClose = options.afterClose;
    this.guard = options.guard ?? (() => {});
  }

  /** Open (or create) the log and recover what it can vouch for. */
  static async open(path: string, options: FileOutboundLogOptions = {}): Promise<FileOutboundLog> {
    let buf: Buffer;
    try {
      buf = await readFile(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      buf = Buffer.alloc(0);
    }
    const { recovery, entries, validEnd } = recoverLog(buf);
    const fh = await open(path, buf.length === 0 ? 'a' : 'r+');
    let size = buf.length;
    if (validEnd < buf.length) {
      // Cut the uncommitted tail so new batches never sit behind garbage.
      await fh.truncate(validEnd);
      await fh.sync();
      size = validEnd;
    }
    await fh.close();
    const appendFh = await open(path, 'a');
    const log = new FileOutboundLog(path, recovery, recovery.intact ? entries : [], appendFh, size, options);
    // A log that cannot vouch for itself is rewritten before it is used again.
    if (!recovery.intact || size === 0) log.rewriteNeeded = true;
    return log;
  }

  get frames(): number {
    return this.mem.frames;
  }

  get bytes(): number {
    return this.mem.bytes;
  }

  append(entry: ReplayEntry): void {
    this.mem.append(entry);
    this.pending.push(entryLine(entry));
    this.pendingLast = entry.seq;
    if (entry.seq > this.highest) this.highest = entry.seq;
  }

  releaseThrough(through: number): void {
    this.mem.releaseThrough(through);
    if (through > this.released) {
      this.released = through;
      this.releasedInFile = true;
    }
  }

  shiftOldest(): ReplayEntry | undefined {
    return this.mem.shiftOldest();
  }

  entriesAfter(after: number): ReplayEntry[] {
    return this.mem.entriesAfter(after);
  }

  clear(): void {
    this.mem.clear();
    this.pending = [];
    this.released = 0;
    this.highest = 0;
    this.synced = 0;
    // Cleared, the log vouches for no session until `bindSession`: a process that cleared it
    // because it could not vouch, and stopped before a fresh session, must not leave behind a
    // header that lets the next one resume.
    this.session = null;
    this.rewriteNeeded = true;
    this.layout++;
  }

  bindSession(sessionId: string): void {
    this.session = sessionId;
    this.rewriteNeeded = true;
    this.layout++;
  }

  sync(): Promise<void> {
    const run = this.chain.then(() => this.syncNow());
    this.chain = run.catch(() => {});
    return run;
  }

  /**
   * Compact if the file holds released frames (so the next start does not mistake them for
   * unacknowledged ones), then close.
   */
  async close(options: { dropUnsynced?: boolean } = {}): Promise<void> {
    await this.chain;
    if (this.closed) return;
    this.closed = true;
    // Also when a failed sync left no handle: a clear() or a new session's header must reach the
    // file if the disk allows, or the next start would believe the old header.
    if (this.releasedInFile || this.rewriteNeeded) {
      try {
        await this.rewrite(options.dropUnsynced === true);
      } catch {
        // Recovery copes with released frames left in the file; a failed compaction costs nothing.
      }
    }
    const fh = this.fh;
    this.fh = null;
    try {
      await fh?.close();
    } finally {
      await this.afterClose?.();
    }
  }

  /**
   * A failed sync must stay a failed sync, not a log disabled until the process restarts: the
   * storage that failed (ENOSPC, EIO) may recover, and every batch after it needs the log. So a
   * failure leaves the log able to try again, and the next attempt rewrites the whole file from
   * memory, which holds every frame appended (released ones aside), whatever the failure left on
   * disk. An append that failed may have left part of its batch, uncommitted, at the tail, and new
   * batches must never sit behind it (recovery would call the log corrupt); a rewrite that failed
   * left the old file (the rename did not happen) or the new one (it did, and the directory fsync
   * failed), both whole. Rewriting again covers every case, and since a rewrite replaces the file
   * rather than appending to it, nothing is written twice.
   */
  private async syncNow(): Promise<void> {
    if (this.closed) throw new Error('outbound log is closed');
    const live = this.mem.bytes + this.mem.frames * 48;
    if (this.rewriteNeeded || !this.fh || (this.fileBytes >= this.compactAtBytes && this.fileBytes > 2 * live)) {
      await this.rewrite();
      return;
    }
    if (this.pending.length === 0) return;
    // Only what this write covers leaves `pending`: a frame appended while it is on its way to
    // the disk waits for the next sync, which must still find it.
    this.guard();
    const covered = this.pending.length;
    const last = this.pendingLast;
    const layout = this.layout;
    const text = this.pending.join('') + commitLine(last);
    const bytes = Buffer.from(text, 'utf8');
    try {
      await writeAll(this.fh, bytes);
      await this.fh.datasync();
    } catch (err) {
      // What reached the file is unknown: the next sync rewrites it (the batch is in memory).
      this.rewriteNeeded = true;
      throw err;
    }
    this.pending.splice(0, covered);
    this.fileBytes += bytes.length;
    // A clear() while the batch was on its way: its seqs are the old numbering's.
    if (layout === this.layout && last > this.synced) this.synced = last;
  }

  /**
   * Header plus the live (unreleased) frames, replaced atomically. On failure nothing changes in
   * memory (`rewriteNeeded` is set, `pending` kept), and the append handle is reopened whatever
   * happened, so the log stays usable; a handle that cannot be reopened is reopened by the next
   * rewrite (a sync finding no handle rewrites).
   */
  private async rewrite(onlySynced = false): Promise<void> {
    this.guard();
    const layout = this.layout;
    const covered = this.pending.length;
    // The header's `sent` is where numbering resumes: past every frame in the file, and past none
    // that the file leaves out (a frame numbered and never written to the socket may be renumbered).
    const through = onlySynced ? this.synced : this.highest;
    const live = this.mem.entriesAfter(0).filter((e) => e.seq <= through);
    const parts = [headerLine(this.session, this.released, through), ...live.map(entryLine)];
    const last = live[live.length - 1];
    if (last) parts.push(commitLine(last.seq));
    const bytes = Buffer.from(parts.join(''), 'utf8');
    // The old handle would point at the replaced file's inode after the rename.
    const old = this.fh;
    this.fh = null;
    this.rewriteNeeded = true;
    try {
      await old?.close();
      await writeFileAtomic(this.path, bytes);
      this.fileBytes = bytes.length;
      // A fresh session granted while the file was written (the writer awaits this sync while a
      // new link is welcomed) cleared and rebound the log: what reached the disk is the old
      // session's, and appending the new one's frames behind its header would leave a file that
      // vouches for neither. Its frames are all in memory; the next sync rewrites.
      if (layout === this.layout) {
        // Frames appended while the file was written are not in it: they stay pending.
        this.pending.splice(0, covered);
        this.rewriteNeeded = false;
        this.releasedInFile = false;
        if (through > this.synced) this.synced = through;
      }
    } finally {
      if (!this.closed) {
        try {
          this.fh = await open(this.path, 'a');
        } catch {
          // The next sync finds no handle and rewrites, which opens one.
        }
      }
    }
  }
}

function headerLine(session: string | null, released: number, sent: number): string {
  const json = JSON.stringify({ v: 1, session, released, sent });
  return `H\t${crc32Hex(json)}\t${json}\n`;
}

function entryLine(e: ReplayEntry): string {
  // Frame text is JSON.stringify output: it never contains a raw newline.
  return `F\t${e.seq}\t${crc32Hex(`${e.seq}\t${e.frame}`)}\t${e.frame}\n`;
}

function commitLine(seq: number): string {
  return `C\t${seq}\t${crc32Hex(`C${seq}`)}\n`;
}

type Parsed =
  | { kind: 'header'; session: string | null; released: number; sent: number }
  | { kind: 'frame'; seq: number; frame: string }
  | { kind: 'commit'; seq: number }
  | { kind: 'bad' };

function parseLine(line: string): Parsed {
  const tab1 = line.indexOf('\t');
  const tag = line.slice(0, tab1);
  if (tag === 'H') {
    const tab2 = line.indexOf('\t', tab1 + 1);
    const crc = line.slice(tab1 + 1, tab2);
    const json = line.slice(tab2 + 1);
    if (tab2 < 0 || crc32Hex(json) !== crc) return { kind: 'bad' };
    try {
      const h = Header.parse(JSON.parse(json));
      return { kind: 'header', session: h.session, released: h.released, sent: h.sent };
    } catch {
      return { kind: 'bad' };
    }
  }
  if (tag === 'F') {
    const tab2 = line.indexOf('\t', tab1 + 1);
    const tab3 = tab2 < 0 ? -1 : line.indexOf('\t', tab2 + 1);
    if (tab3 < 0) return { kind: 'bad' };
    const seqText = line.slice(tab1 + 1, tab2);
    const crc = line.slice(tab2 + 1, tab3);
    const frame = line.slice(tab3 + 1);
    const seq = Number(seqText);
    if (!/^[1-9]\d*$/.test(seqText) || !Number.isSafeInteger(seq) || crc32Hex(`${seq}\t${frame}`) !== crc) return { kind: 'bad' };
    // The checksum vouches for the bytes, not for what the writer put in them: a frame that is not
    // its own sequenced JSON object would be replayed at every resume and refused (4400) each time.
    return sequencedFrame(frame, seq) ? { kind: 'frame', seq, frame } : { kind: 'bad' };
  }
  if (tag === 'C') {
    const tab2 = line.indexOf('\t', tab1 + 1);
    if (tab2 < 0) return { kind: 'bad' };
    const seqText = line.slice(tab1 + 1, tab2);
    const seq = Number(seqText);
    if (!/^[1-9]\d*$/.test(seqText) || crc32Hex(`C${seq}`) !== line.slice(tab2 + 1)) return { kind: 'bad' };
    return { kind: 'commit', seq };
  }
  return { kind: 'bad' };
}

function sequencedFrame(text: string, seq: number): boolean {
  try {
    const o: unknown = JSON.parse(text);
    return typeof o === 'object' && o !== null && !Array.isArray(o) && (o as { seq?: unknown }).seq === seq;
  } catch {
    return false;
  }
}

/** Read a log's bytes: what it can vouch for, and where its committed part ends. Pure. */
export function recoverLog(buf: Uint8Array): { recovery: LogRecovery; entries: ReplayEntry[]; validEnd: number } {
  const notIntact = (problem: string, session: string | null = null, released = 0) => ({
    recovery: { ...NO_RECOVERY, session, released, intact: false, problem },
    entries: [],
    validEnd: buf.length,
  });
  if (buf.length === 0) return { recovery: { ...NO_RECOVERY }, entries: [], validEnd: 0 };

  const lines: { text: string; end: number }[] = [];
  let start = 0;
  for (let i = 0; i < buf.length; i++) {
    if (buf[i] === NL) {
      lines.push({ text: Buffer.from(buf.subarray(start, i)).toString('utf8'), end: i + 1 });
      start = i + 1;
    }
  }
  // Bytes after the last newline are a record cut short by the crash; never committed.
  const first = lines[0] ? parseLine(lines[0].text) : ({ kind: 'bad' } as const);
  if (first.kind !== 'header') return notIntact('the log has no readable header');

  const committed: ReplayEntry[] = [];
  let batch: ReplayEntry[] = [];
  let badSinceCommit: string | null = null;
  let validEnd = (lines[0] as { end: number }).end;
  let lastSeq: number;
  for (let i = 1; i < lines.length; i++) {
    const { text, end } = lines[i] as { text: string; end: number };
    const rec = parseLine(text);
    if (rec.kind === 'frame') {
      if (badSinceCommit === null) batch.push({ seq: rec.seq, frame: rec.frame, bytes: Buffer.byteLength(rec.frame, 'utf8') });
    } else if (rec.kind === 'commit') {
      if (badSinceCommit !== null) return notIntact(`a committed batch holds an unreadable record (line ${badSinceCommit})`, first.session, first.released);
      const batchLast = batch[batch.length - 1];
      if (!batchLast || batchLast.seq !== rec.seq) return notIntact(`commit ${rec.seq} does not close its batch`, first.session, first.released);
      committed.push(...batch);
      batch = [];
      validEnd = end;
    } else {
      badSinceCommit ??= String(i + 1);
    }
  }

  // Contiguity: a hole in what was sent means a frame the log cannot replay.
  let lostThrough = 0;
  const live: ReplayEntry[] = [];
  for (const e of committed) {
    if (e.seq <= first.released) continue;
    const prev = live[live.length - 1];
    if (!prev) {
      if (e.seq > first.released + 1) lostThrough = e.seq - 1;
    } else if (e.seq !== prev.seq + 1) {
      return notIntact(`committed frames jump from seq ${prev.seq} to ${e.seq}`, first.session, first.released);
    }
    live.push(e);
  }
  const lastLive = live[live.length - 1];
  lastSeq = Math.max(first.released, first.sent, lastLive?.seq ?? 0);
  // Frames the header says were sent but that no live record holds left by overflow, unacked.
  if (!live[0] && first.sent > first.released) lostThrough = first.sent;
  const discardedBytes = buf.length - validEnd;
  return {
    recovery: {
      session: first.session,
      intact: true,
      problem: discardedBytes > 0 ? `discarded ${discardedBytes} uncommitted bytes from the tail` : null,
      released: first.released,
      lastSeq,
      lostThrough,
      discardedBytes,
    },
    entries: live,
    validEnd,
  };
}
