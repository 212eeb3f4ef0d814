import { mkdtemp, readFile, rm, truncate, writeFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileOutboundLog, recoverLog } from '../../../src/operator/outbound-log';
import { OutboundSequencer } from '../../../src/protocol';
import { crc32Hex } from '../../../src/operator/crc32';

let dir: string;
let file: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-log-'));
  file = path.join(dir, 'outbound.log');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const frame = (seq: number) => JSON.stringify({ v: 1, type: 'node.observed', seq, payload: { note: `frame ${seq} ✓` } });
const entry = (seq: number) => ({ seq, frame: frame(seq), bytes: Buffer.byteLength(frame(seq)) });

async function writeBatches(batches: number[][], session = 'S1'): Promise<FileOutboundLog> {
  const log = await FileOutboundLog.open(file);
  log.bindSession(session);
  // The header is written by an atomic rewrite; the batches after it are appended, as in use.
  await log.sync();
  for (const batch of batches) {
    for (const seq of batch) log.append(entry(seq));
    await log.sync();
  }
  return log;
}

describe('FileOutboundLog', () => {
  it('recovers every committed frame, in order, with its exact text', async () => {
    const log = await writeBatches([[1, 2], [3], [4, 5, 6]]);
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ session: 'S1', intact: true, released: 0, lastSeq: 6, problem: null });
    expect(again.entriesAfter(0)).toEqual([1, 2, 3, 4, 5, 6].map(entry));
    await again.close();
  });

  it('discards a truncated last record: it was never committed, so never sent', async () => {
    const log = await writeBatches([[1, 2]]);
    const committedSize = (await stat(file)).size;
    log.append(entry(3));
    await log.sync();
    await log.close();
    // The crash cut the last batch mid-record.
    await truncate(file, committedSize + 20);
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ intact: true, lastSeq: 2, discardedBytes: 20 });
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([1, 2]);
    // The tail is cut from the file, so new batches do not sit behind it.
    expect((await stat(file)).size).toBe(committedSize);
    again.append(entry(3));
    await again.sync();
    await again.close();
    const third = await FileOutboundLog.open(file);
    expect(third.entriesAfter(0).map((e) => e.seq)).toEqual([1, 2, 3]);
    await third.close();
  });

  it('discards whole records written without their commit', async () => {
    const log = await writeBatches([[1]]);
    await log.close();
    const text = await readFile(file, 'utf8');
    const record = text.split('\n').find((l) => l.startsWith('F\t1\t'))!;
    await writeFile(file, text + record.replace('F\t1\t', 'F\t2\t') + '\n');
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ intact: true, lastSeq: 1 });
    await again.close();
  });

  it('a damaged record inside a committed batch makes the log unable to vouch for itself', async () => {
    const log = await writeBatches([[1, 2], [3]]);
    await log.close();
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace('frame 2', 'frame X'));
    const again = await FileOutboundLog.open(file);
    expect(again.recovery.intact).toBe(false);
    expect(again.recovery.problem).toMatch(/unreadable record/);
    expect(again.frames).toBe(0);
    await again.close();
  });

  it('a record whose checksum holds but whose frame is not its sequenced JSON object makes the log unable to vouch for itself, rather than replayed at every resume', async () => {
    const log = await writeBatches([[1, 2], [3]]);
    await log.close();
    const text = await readFile(file, 'utf8');
    // What a checksum cannot catch: bytes written wrong by the writer itself, or changed together
    // with their checksum. Replayed, the hub would close 4400 on it at every resume, for ever.
    const reseal = (seq: number, body: string) => `F\t${seq}\t${crc32Hex(`${seq}\t${body}`)}\t${body}`;
    for (const body of ['{"v":1,"type":"node.observed","seq":2,', JSON.stringify({ v: 1, type: 'node.observed', seq: 7, payload: {} }), '[2]']) {
      await writeFile(file, text.split('\n').map((l) => (l.startsWith('F\t2\t') ? reseal(2, body) : l)).join('\n'));
      const again = await FileOutboundLog.open(file);
      expect(again.recovery.intact, body).toBe(false);
      expect(again.recovery.problem, body).toMatch(/unreadable record/);
      expect(again.frames, body).toBe(0);
      await again.close();
    }
  });

  it('a log that could not vouch for itself, opened and closed unused, vouches for its session no more after the close', async () => {
    const log = await writeBatches([[1, 2], [3]]);
    await log.close();
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace('frame 2', 'frame X'));
    // A process that opened the state directory and gave it up before its client restored the
    // session (a start that failed): the close rewrites the file it could not read.
    const unused = await FileOutboundLog.open(file);
    expect(unused.recovery.intact).toBe(false);
    await unused.close();
    const next = await FileOutboundLog.open(file);
    // Frames 1-3 may have reached the hub: a log resumable as S1 with none of them would number
    // new frames over them, and the hub would never see what they said.
    expect(next.recovery.intact && next.recovery.session === 'S1').toBe(false);
    await next.close();
  });

  it('releases acknowledged frames and compacts the file once they dominate it', async () => {
    const log = await FileOutboundLog.open(file, { compactAtBytes: 1 });
    log.bindSession('S1');
    const seq = new OutboundSequencer(log, { frames: 1e9, bytes: 1e12 });
    for (let i = 0; i < 20; i++) seq.stamp((s) => frame(s));
    await log.sync();
    const before = (await stat(file)).size;
    seq.acknowledge(18);
    seq.stamp((s) => frame(s));
    await log.sync();
    expect((await stat(file)).size).toBeLessThan(before / 2);
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ released: 18, lastSeq: 21, intact: true });
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([19, 20, 21]);
    await again.close();
  });

  it('closing compacts acknowledged frames away, so a restart does not take them for unacked', async () => {
    const log = await writeBatches([[1, 2, 3]]);
    log.releaseThrough(2);
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ released: 2, lastSeq: 3 });
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([3]);
    await again.close();
  });

  it('a fresh session clears the log and rebinds it before anything new is written', async () => {
    const log = await writeBatches([[1, 2, 3]]);
    log.clear();
    log.bindSession('S2');
    log.append(entry(1));
    await log.sync();
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ session: 'S2', lastSeq: 1 });
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([1]);
    await again.close();
  });

  it('a frame appended while a sync is on its way to the disk is made durable by the next sync, appended or rewritten', async () => {
    /** Hold `method` of the log's open file handle until released; resolves `reached` when it is called. */
    const hold = (log: FileOutboundLog, method: 'datasync' | 'close') => {
      const fh = (log as unknown as { fh: Record<string, () => Promise<void>> }).fh;
      const real = fh[method]!.bind(fh);
      let reached!: () => void;
      let release!: () => void;
      const at = new Promise<void>((r) => (reached = r));
      const gate = new Promise<void>((r) => (release = r));
      fh[method] = async () => {
        reached();
        await gate;
        return real();
      };
      return { at, release };
    };
    const log = await writeBatches([[1]]);
    // The append path: frame 3 arrives while frames 2's batch waits for its fdatasync.
    const appending = hold(log, 'datasync');
    log.append(entry(2));
    const first = log.sync();
    await appending.at;
    log.append(entry(3));
    appending.release();
    await first;
    await log.sync();
    const mid = await FileOutboundLog.open(file);
    expect(mid.entriesAfter(0)).toEqual([1, 2, 3].map(entry));
    await mid.close();
    // The rewrite path (a new session's layout): frame 5 arrives after the live frames were read for the new file.
    log.clear();
    log.bindSession('S2');
    log.append(entry(4));
    const rewriting = hold(log, 'close');
    const second = log.sync();
    await rewriting.at;
    log.append(entry(5));
    rewriting.release();
    await second;
    await log.sync();
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ session: 'S2', intact: true, problem: null });
    expect(again.entriesAfter(0)).toEqual([4, 5].map(entry));
    await again.close();
  });

  it('remembers the highest seq sent even when every frame was released', async () => {
    const log = await FileOutboundLog.open(file, { compactAtBytes: 1 });
    log.bindSession('S1');
    const seq = new OutboundSequencer(log, { frames: 1e9, bytes: 1e12 });
    for (let i = 0; i < 5; i++) seq.stamp((s) => frame(s));
    await log.sync();
    seq.acknowledge(5);
    log.bindSession('S1'); // force a rewrite
    await log.sync();
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ released: 5, lastSeq: 5, lostThrough: 0 });
    await again.close();
  });
});

describe('recoverLog (pure)', () => {
  it('property: a crash at any byte keeps exactly the batches committed before it', async () => {
    // Build one log image in memory, batch by batch, remembering where each commit ended.
    const log = await writeBatches([[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]]);
    await log.close();
    const image = await readFile(file);
    const text = image.toString('utf8');
    const commitEnds: { end: number; last: number }[] = [];
    let offset = 0;
    for (const line of text.split('\n').slice(0, -1)) {
      offset += Buffer.byteLength(line) + 1;
      if (line.startsWith('C\t')) commitEnds.push({ end: offset, last: Number(line.split('\t')[1]) });
    }
    fc.assert(
      fc.property(fc.integer({ min: 0, max: image.length }), (cut) => {
        const { recovery, entries } = recoverLog(image.subarray(0, cut));
        const committed = commitEnds.filter((c) => c.end <= cut);
        const expectedLast = committed.length ? committed[committed.length - 1]!.last : 0;
        if (cut === 0) return recovery.session === null && entries.length === 0;
        const headerEnd = text.indexOf('\n') + 1;
        if (cut < headerEnd) return recovery.intact === false && entries.length === 0;
        return recovery.intact && recovery.lastSeq === expectedLast && entries.map((e) => e.seq).join() === Array.from({ length: expectedLast }, (_, i) => i + 1).join();
      }),
    );
  });
});
