/**
 * The FileOutboundLog under a disk that fails, or a process that dies, at any step of its syncs.
 * The other log tests each place one fault by hand; this one places it at every file-system call a random run makes
 * (open, write, fdatasync, fsync, truncate, the atomic rewrite's rename and directory fsync), as
 * an EIO, a write the disk cut short followed by ENOSPC, or up to four failures in one run, across
 * appends, compactions, fresh sessions and a final close with or without `dropUnsynced`. A crash
 * is the file as the failing call left it (as it began, or with half a write in it). What the next
 * process reads must keep every frame whose sync resolved (the writer has put it on the socket),
 * with its text, and never a frame under a seq it did not have; after `close({ dropUnsynced: true })`
 * no frame whose sync was never attempted; and the next process, continuing the session, must find
 * its own frames after them.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

/** Call `failAt` (and each of `also`) of the run fails; `crashed` is the log file as call `failAt` left it. */
const fault = vi.hoisted(() => ({ calls: 0, failAt: -1, also: [] as number[], shortWrite: false, cut: false, file: '', crashed: null as Buffer | null }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  const { readFileSync: readNow } = await import('node:fs');
  const eio = (what: string) => Object.assign(new Error(`EIO: i/o error, ${what}`), { code: 'EIO' });
  /** Counts the call; true when it is the one that fails. */
  const failing = (): boolean => {
    fault.calls++;
    if (fault.calls === fault.failAt && fault.crashed === null) {
      try {
        fault.crashed = readNow(fault.file);
      } catch {
        fault.crashed = Buffer.alloc(0);
      }
    }
    return fault.calls === fault.failAt || fault.also.includes(fault.calls);
  };
  const wrap = (fh: import('node:fs/promises').FileHandle) => {
    for (const m of ['datasync', 'sync', 'truncate', 'writeFile'] as const) {
      const call = (fh[m] as (...a: unknown[]) => Promise<unknown>).bind(fh);
      Object.defineProperty(fh, m, { value: async (...a: unknown[]) => (failing() ? Promise.reject(eio(m)) : call(...a)) });
    }
    const write = (fh.write as (b: Uint8Array, off: number, len: number) => Promise<{ bytesWritten: number }>).bind(fh);
    Object.defineProperty(fh, 'write', {
      value: async (b: Uint8Array, off = 0, len = b.length - off) => {
        // A disk that fills part-way stores half the bytes; the next write says why.
        if (fault.cut) {
          fault.cut = false;
          throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
        }
        if (!failing()) return write(b, off, len);
        if (!fault.shortWrite || len < 2) throw eio('write');
        fault.cut = true;
        const half = await write(b, off, len >> 1);
        // A crash here leaves the half record on disk.
        if (fault.calls === fault.failAt) fault.crashed = readNow(fault.file);
        return half;
      },
    });
    return fh;
  };
  const open = async (...args: Parameters<typeof real.open>) => {
    if (failing()) throw eio('open');
    return wrap(await real.open(...args));
  };
  const rename = async (...args: Parameters<typeof real.rename>) => {
    if (failing()) throw eio('rename');
    return real.rename(...args);
  };
  return { ...real, open, rename, default: { ...real, open, rename } };
});

import { FileOutboundLog, recoverLog } from '../../../src/operator/outbound-log';

type Step = { op: 'append'; n: number } | { op: 'sync' } | { op: 'ack'; share: number } | { op: 'fresh' };
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant('append' as const), n: fc.integer({ min: 1, max: 3 }) }),
  fc.constant({ op: 'sync' as const }),
  fc.constant({ op: 'sync' as const }),
  fc.record({ op: fc.constant('ack' as const), share: fc.double({ min: 0, max: 1, noNaN: true }) }),
  fc.constant({ op: 'fresh' as const }),
);

/** What the writer knows of the session in force: the frames it numbered, and how far they went. */
interface Model {
  session: string;
  texts: Map<number, string>;
  /** Highest seq of a sync that resolved: on the socket, so it must survive. */
  sent: number;
  /** Highest seq of a sync that was attempted: past it, nothing may reach the file under dropUnsynced. */
  attempted: number;
  acked: number;
}

let dir: string;
let run = 0;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'review-sdkdisk-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

describe('the outbound log with a fault at any file-system call of its syncs', () => {
  it('property: what the next process reads holds every frame that went out, exactly, and it continues after them', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 25 }),
        fc.record({ failAt: fc.integer({ min: 1, max: 80 }), also: fc.array(fc.integer({ min: 1, max: 120 }), { maxLength: 4 }), shortWrite: fc.boolean(), crash: fc.boolean() }),
        fc.record({ compactAtBytes: fc.integer({ min: 1, max: 400 }), close: fc.constantFrom('none', 'close', 'dropUnsynced') }),
        async (steps, f, end) => {
          const file = path.join(dir, `outbound-${run++}.log`);
          Object.assign(fault, { calls: 0, failAt: -1, also: [], shortWrite: f.shortWrite, cut: false, file, crashed: null });
          const log = await FileOutboundLog.open(file, { compactAtBytes: end.compactAtBytes });
          let m: Model = { session: 'S1', texts: new Map(), sent: 0, attempted: 0, acked: 0 };
          log.bindSession(m.session);
          let atCrash: Model | null = null;
          Object.assign(fault, { failAt: f.failAt, also: f.also });
          for (const s of steps) {
            const before: Model = { ...m, texts: new Map(m.texts) };
            if (s.op === 'append') {
              for (let i = 0; i < s.n; i++) {
                const seq = m.texts.size + 1;
                const frame = JSON.stringify({ v: 1, type: 'node.observed', seq, payload: { session: m.session } });
                m.texts.set(seq, frame);
                log.append({ seq, frame, bytes: Buffer.byteLength(frame) });
              }
            } else if (s.op === 'sync') {
              const through = m.texts.size;
              m.attempted = through;
              await log.sync().then(() => (m.sent = through), () => {});
            } else if (s.op === 'ack') {
              const through = Math.floor(m.sent * s.share);
              if (through > m.acked) log.releaseThrough((m.acked = through));
            } else {
              m = { session: `S${Number(m.session.slice(1)) + 1}`, texts: new Map(), sent: 0, attempted: 0, acked: 0 };
              log.clear();
              log.bindSession(m.session);
            }
            if (atCrash === null && fault.crashed !== null) atCrash = before;
          }
          if (end.close !== 'none') await log.close({ dropUnsynced: end.close === 'dropUnsynced' }).catch(() => {});
          const crashed = f.crash && atCrash !== null;
          const image = crashed ? (fault.crashed as Buffer) : readFileSync(file);
          if (crashed) m = atCrash as Model;
          Object.assign(fault, { failAt: -1, also: [], cut: false });
          if (end.close === 'none') await log.close().catch(() => {});

          const { recovery, entries } = recoverLog(image);
          if (m.sent === 0 && !(recovery.intact && recovery.session === m.session)) return; // nothing of this session went out
          expect(recovery).toMatchObject({ intact: true, session: m.session });
          expect(recovery.lastSeq).toBeGreaterThanOrEqual(m.sent);
          const live = entries.filter((e) => e.seq > m.acked);
          for (const e of live) expect(e.frame).toBe(m.texts.get(e.seq));
          expect(live.filter((e) => e.seq <= m.sent).map((e) => e.seq)).toEqual(Array.from({ length: m.sent - m.acked }, (_, i) => m.acked + i + 1));
          if (!crashed && end.close === 'dropUnsynced') expect(entries.filter((e) => e.seq > m.attempted)).toEqual([]);

          // The next process continues the session from what the file vouches for.
          const next = path.join(dir, `outbound-${run++}.log`);
          writeFileSync(next, image);
          const resumed = await FileOutboundLog.open(next);
          resumed.releaseThrough(m.acked);
          const seq = Math.max(recovery.lastSeq, recovery.released) + 1;
          const frame = JSON.stringify({ v: 1, type: 'node.observed', seq, payload: { life: 2 } });
          resumed.append({ seq, frame, bytes: Buffer.byteLength(frame) });
          await resumed.sync();
          await resumed.close();
          const third = await FileOutboundLog.open(next);
          expect(third.recovery).toMatchObject({ intact: true, session: m.session, lastSeq: seq });
          expect(third.entriesAfter(m.acked).map((e) => e.frame)).toEqual([...live.map((e) => e.frame), frame]);
          await third.close();
        },
      ),
      { numRuns: 800 },
    );
  }, 60_000);
});
