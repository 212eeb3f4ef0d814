/**
 * A failed rewrite of the FileOutboundLog. rewrite() used to close its file handle before
 * writeFileAtomic and reopen it only after success, so one failed rewrite (ENOSPC, EIO for a
 * moment) left the log closed for good: every later sync() threw "outbound log is closed", every
 * batch the writer tried failed, every session closed 1011, and the operator could not send
 * another frame until its process restarted. Proves that a storage failure stays transient: the
 * next sync succeeds once the disk recovers, the next session writes again, and what the log
 * holds afterwards is every frame exactly once, whether the failed rewrite left the old file (it
 * failed before the rename) or the new one (it failed after), and after a failed append too.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

/** `count` rewrites fail: before the rename (the old file stays) or after it (the new one is in place). */
const failNext = vi.hoisted(() => ({ count: 0, after: false }));
vi.mock('../../../src/operator/atomic-file', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../../src/operator/atomic-file')>();
  return {
    ...real,
    writeFileAtomic: async (...args: Parameters<typeof real.writeFileAtomic>) => {
      if (failNext.count > 0) {
        failNext.count--;
        if (failNext.after) {
          await real.writeFileAtomic(...args);
          throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
        }
        throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      }
      return real.writeFileAtomic(...args);
    },
  };
});

import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { FileOutboundLog } from '../../../src/operator/outbound-log';
import { makeClient, reconnectAfterBackoff, type TestClient } from './support/harness';
import { ScriptedHub } from './support/scripted-hub';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'outbound-log-rewrite-'));
  failNext.count = 0;
  failNext.after = false;
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const frame = (seq: number) => ({ seq, frame: `{"v":1,"type":"node.observed","seq":${seq}}`, bytes: 40 });

describe('a failed rewrite of the outbound log', () => {
  it('the sync after a failed rewrite succeeds once the disk recovers, and the frames survive a reopen', async () => {
    const file = path.join(dir, 'outbound.log');
    const log = await FileOutboundLog.open(file);
    log.bindSession('S1');
    log.append(frame(1));
    failNext.count = 1;
    // The first sync rewrites the new file (header): the disk is full for a moment.
    await expect(log.sync()).rejects.toThrow(/ENOSPC/);
    // The disk recovers; the next batch must be made durable.
    log.append(frame(2));
    await expect(log.sync()).resolves.toBeUndefined();
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery.intact).toBe(true);
    expect(again.recovery.session).toBe('S1');
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([1, 2]);
    await again.close();
  });

  it('a rewrite that failed after its rename (the directory fsync) leaves nothing written twice', async () => {
    const file = path.join(dir, 'outbound.log');
    const log = await FileOutboundLog.open(file);
    log.bindSession('S1');
    log.append(frame(1));
    await log.sync();
    log.append(frame(2));
    log.releaseThrough(0);
    log.bindSession('S1'); // the next sync rewrites
    failNext.count = 1;
    failNext.after = true;
    await expect(log.sync()).rejects.toThrow(/EIO/);
    log.append(frame(3));
    await expect(log.sync()).resolves.toBeUndefined();
    log.append(frame(4));
    await expect(log.sync()).resolves.toBeUndefined(); // an ordinary append after the recovery
    await log.close();
    const again = await FileOutboundLog.open(file);
    expect(again.recovery).toMatchObject({ intact: true, session: 'S1', problem: null });
    expect(again.entriesAfter(0).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
    await again.close();
    // No temp files left behind by the failures.
    expect((await readdir(dir)).sort()).toEqual(['outbound.log']);
  });

  it('a sync after close() still refuses: only close() ends the log', async () => {
    const log = await FileOutboundLog.open(path.join(dir, 'outbound.log'));
    log.bindSession('S1');
    log.append(frame(1));
    failNext.count = 1;
    await expect(log.sync()).rejects.toThrow(/ENOSPC/);
    await log.close();
    log.append(frame(2));
    await expect(log.sync()).rejects.toThrow(/closed/);
  });

  it('an operator whose log rewrite failed once can write again on its next session', async () => {
    const hub = await ScriptedHub.start();
    let t: TestClient | null = null;
    try {
      const outboundLog = await FileOutboundLog.open(path.join(dir, 'outbound.log'));
      t = makeClient(hub, { outboundLog, cursorStore: new MemoryCursorStore() });
      await t.client.start();
      const conn1 = await hub.nextConnection();
      await conn1.nextOf('hello');
      // The fresh session's first batch rewrites the log: the disk is full for a moment.
      failNext.count = 1;
      conn1.welcome({ session_id: 'S1', full_resync: true });
      await conn1.waitClosed();
      expect(failNext.count).toBe(0);
      // The disk has recovered. The next session must get its observed snapshot.
      await reconnectAfterBackoff(t);
      const conn2 = await hub.nextConnection();
      await conn2.nextOf('hello');
      conn2.welcome({ session_id: 'S2', full_resync: true });
      await conn2.seen((f) => f.type === 'resync.begin' || conn2.closed !== null, 'a resync.begin (or a close) on the next session');
      // Today: closed 1011 'local storage failure' again, as on every session after it.
      expect(conn2.closed).toBeNull();
      expect(conn2.frames.some((f) => f.type === 'resync.begin')).toBe(true);
    } finally {
      await t?.client.stop({ graceful: false });
      await hub.stop();
    }
  });
});
