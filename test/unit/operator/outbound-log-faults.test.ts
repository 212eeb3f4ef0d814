/**
 * The FileOutboundLog under a disk that fills mid-write and under a fresh session granted while a
 * rewrite is on the disk (found by a review of the SDK's durability, 2026-12-04):
 * - a write(2) that the disk cut short (it filled part-way) is no error: libuv reports the bytes
 *   it wrote, and the log ignored the count, so `sync()` resolved for a batch whose commit never
 *   reached the file. The writer then put the batch on the socket; a crash lost frames the hub may
 *   have seen (the numbering was reused) and any later batch made the log unable to vouch for
 *   itself;
 * - `clear()` and `bindSession()` (a fresh session) during a rewrite were undone when the rewrite
 *   finished: the file kept the old session's header and frames, the new session's frames were
 *   appended after them, and every crash until the next compaction cost a full resync.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

/** Armed: the next append write stores only half its bytes (the disk filled), the one after fails ENOSPC. */
const shortWrite = vi.hoisted(() => ({ armed: false, cut: false }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  const open = async (...args: Parameters<typeof real.open>) => {
    const fh = await real.open(...args);
    if (args[1] !== 'a') return fh;
    const write = fh.write.bind(fh) as (b: Uint8Array, off?: number, len?: number) => Promise<{ bytesWritten: number; buffer: Uint8Array }>;
    Object.defineProperty(fh, 'write', {
      value: async (b: Uint8Array, off = 0, len = b.length - off) => {
        if (!shortWrite.armed) return write(b, off, len);
        if (shortWrite.cut) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
        shortWrite.cut = true;
        return write(b, off, Math.max(1, len >> 1));
      },
    });
    return fh;
  };
  return { ...real, open, default: { ...real, open } };
});

/** Armed: the next atomic rewrite of the outbound log waits at its start until released. */
const gate = vi.hoisted(() => ({ armed: false, reached: null as null | (() => void), release: null as null | (() => void) }));
vi.mock('../../../src/operator/atomic-file', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../../src/operator/atomic-file')>();
  return {
    ...real,
    writeFileAtomic: async (...args: Parameters<typeof real.writeFileAtomic>) => {
      if (gate.armed && String(args[0]).endsWith('outbound.log')) {
        gate.armed = false;
        await new Promise<void>((resolve) => {
          gate.release = resolve;
          gate.reached?.();
        });
      }
      return real.writeFileAtomic(...args);
    },
  };
});

import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { FileOutboundLog } from '../../../src/operator/outbound-log';
import { ackAll, makeClient, readResync, reconnectAfterBackoff, SNAPSHOT } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let dir: string;
let file: string;
let hub: ScriptedHub | null = null;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'review-sdk-outbound-log-'));
  file = path.join(dir, 'outbound.log');
  shortWrite.armed = false;
  shortWrite.cut = false;
  gate.armed = false;
  gate.reached = null;
  gate.release = null;
});
afterEach(async () => {
  gate.release?.();
  await hub?.stop();
  hub = null;
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const frame = (session: string, seq: number) => JSON.stringify({ v: 1, type: 'node.observed', seq, payload: { note: `${session} frame ${seq}` } });
const entry = (session: string, seq: number) => ({ seq, frame: frame(session, seq), bytes: Buffer.byteLength(frame(session, seq)) });

describe('a disk that fills in the middle of an append', () => {
  it('fails the sync (the batch is never reported durable), and once the disk recovers the log vouches for every frame', async () => {
    const log = await FileOutboundLog.open(file);
    log.bindSession('S1');
    log.append(entry('S1', 1));
    await log.sync(); // the header and frame 1, rewritten whole
    log.append(entry('S1', 2));
    await log.sync(); // appended

    shortWrite.armed = true;
    log.append(entry('S1', 3));
    log.append(entry('S1', 4));
    await expect(log.sync()).rejects.toThrow(/ENOSPC/);

    shortWrite.armed = false;
    log.append(entry('S1', 5));
    await log.sync();
    // A crash now: the next process reads what is on disk.
    const reopened = await FileOutboundLog.open(file);
    expect(reopened.recovery).toMatchObject({ session: 'S1', intact: true, lastSeq: 5 });
    expect(reopened.entriesAfter(0).map((e) => e.frame)).toEqual([1, 2, 3, 4, 5].map((s) => frame('S1', s)));
    await reopened.close();
    await log.close();
  });
});

describe('a fresh session granted while the log is being rewritten', () => {
  it('the file ends up naming the new session and holding only its frames, so a crash afterwards resumes it', async () => {
    const log = await FileOutboundLog.open(file);
    log.bindSession('S1');
    for (let s = 1; s <= 3; s++) log.append(entry('S1', s));
    await log.sync();
    log.releaseThrough(1);

    // A rewrite (say a compaction) is on the disk when the hub grants a fresh session S2.
    log.bindSession('S1');
    gate.armed = true;
    const reached = new Promise<void>((r) => (gate.reached = r));
    const rewriting = log.sync();
    await reached;
    log.clear(); // SessionState.fresh(): OutboundSequencer.reset(), then bindSession
    log.bindSession('S2');
    gate.release?.();
    await rewriting; // the writer's batch of the old link ends
    log.append(entry('S2', 1)); // its next batch, on the new link: S2's frame 1
    await log.sync();

    // A crash now: the next process reads what is on disk.
    const reopened = await FileOutboundLog.open(file);
    expect(reopened.recovery).toMatchObject({ session: 'S2', intact: true, lastSeq: 1 });
    expect(reopened.entriesAfter(0).map((e) => e.frame)).toEqual([frame('S2', 1)]);
    await reopened.close();
    await log.close();
  });
});

describe('a hub failover while the outbound log is being compacted', () => {
  it('the operator that crashes afterwards resumes the fresh session instead of asking for another resync', async () => {
    const h = (hub = await ScriptedHub.start());
    const store = new MemoryCursorStore(); // survives the crash, like cursor.json
    // Every sync whose file is mostly acknowledged frames compacts (rewrites) it.
    const first = makeClient(h, { cursorStore: store, outboundLog: await FileOutboundLog.open(file, { compactAtBytes: 1 }) });
    await first.client.start();
    const conn = await h.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await readResync(conn);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    await eventually(() => first.client.stats.unacked === 0, 'S1 acknowledged');

    // A report: its batch compacts the log, and the hub pod goes away while that is on the disk.
    gate.armed = true;
    const reached = new Promise<void>((r) => (gate.reached = r));
    first.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await reached;
    conn.terminate();
    await reconnectAfterBackoff(first);
    const conn2 = await h.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true }); // another pod: a fresh session
    await eventually(() => first.client.session.sessionId === 'S2', 'the fresh session S2');
    gate.release?.();
    await readResync(conn2); // S2's observed snapshot, durable in the log before it was written
    await eventually(() => store.peek()?.sessionId === 'S2', 'S2 recorded');
    conn2.terminate(); // and the process is killed: no stop, no close of the log

    const second = makeClient(h, { cursorStore: store, outboundLog: await FileOutboundLog.open(file) });
    await second.client.start();
    const conn3 = await h.nextConnection();
    const hello = await conn3.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S2', lossy: false });
    await second.client.stop({ graceful: false });
  });
});
