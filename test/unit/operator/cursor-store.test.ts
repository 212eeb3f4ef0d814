import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CorruptCursorStoreError, emptyRecord, FileCursorStore, MemoryCursorStore, type DurableRecord } from '../../../src/operator/cursor-store';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-cursor-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const record = (cursor: number, sessionId = 'S1'): DurableRecord => ({ ...emptyRecord(), sessionId, cursor, outbound: { nextSeq: cursor + 1, peerAck: cursor, lostThrough: 0 } });

describe('FileCursorStore', () => {
  it('loads null before the first save, then what was saved', async () => {
    const store = new FileCursorStore(path.join(dir, 'cursor.json'));
    expect(await store.load()).toBeNull();
    await store.save(record(7));
    expect(await new FileCursorStore(path.join(dir, 'cursor.json')).load()).toEqual(record(7));
  });

  it('a crash between writing the temp file and the rename leaves the previous record whole', async () => {
    const file = path.join(dir, 'cursor.json');
    await new FileCursorStore(file).save(record(1));
    const crashing = new FileCursorStore(file, {
      afterTempWrite: () => {
        throw new Error('power lost');
      },
    });
    await expect(crashing.save(record(2))).rejects.toThrow('power lost');
    // The temp file is left behind exactly as a crash would leave it…
    expect((await readdir(dir)).some((f) => f.includes('.tmp-'))).toBe(true);
    // …and the record is the old one, intact.
    expect(await new FileCursorStore(file).load()).toEqual(record(1));
    // The next save supersedes it.
    await new FileCursorStore(file).save(record(3));
    expect(await new FileCursorStore(file).load()).toEqual(record(3));
  });

  it('a torn temp file from a crashed writer is never read', async () => {
    const file = path.join(dir, 'cursor.json');
    await new FileCursorStore(file).save(record(4));
    await writeFile(`${file}.tmp-999-1`, '{"version":1,"sess');
    expect(await new FileCursorStore(file).load()).toEqual(record(4));
  });

  it('an unreadable record is reported as corrupt, not guessed at, and can be moved aside', async () => {
    const file = path.join(dir, 'cursor.json');
    await writeFile(file, '{"version":1,"sessionId":"S1","cursor":-3}');
    const store = new FileCursorStore(file);
    await expect(store.load()).rejects.toBeInstanceOf(CorruptCursorStoreError);
    const aside = await store.quarantine();
    expect(aside).not.toBeNull();
    expect(await store.load()).toBeNull();
    await writeFile(file, 'not json');
    await expect(store.load()).rejects.toBeInstanceOf(CorruptCursorStoreError);
  });

  it('a changed digit that keeps the JSON valid and the record well formed is caught by its checksum', async () => {
    const file = path.join(dir, 'cursor.json');
    await new FileCursorStore(file).save(record(41));
    const text = await readFile(file, 'utf8');
    // A raised cursor would skip the hub's frames 42 to 91 on the next resume.
    const rotted = text.replace('"cursor":41', '"cursor":91');
    expect(rotted).not.toBe(text);
    expect(JSON.parse(rotted)).toMatchObject({ cursor: 91 });
    await writeFile(file, rotted);
    await expect(new FileCursorStore(file).load()).rejects.toThrow(/does not match its checksum/);
    // A session id's letter, and a checksum that is not text, likewise.
    await writeFile(file, text.replace('"sessionId":"S1"', '"sessionId":"S2"'));
    await expect(new FileCursorStore(file).load()).rejects.toBeInstanceOf(CorruptCursorStoreError);
    await writeFile(file, text.replace(/"checksum":"[0-9a-f]+"/, '"checksum":7'));
    await expect(new FileCursorStore(file).load()).rejects.toBeInstanceOf(CorruptCursorStoreError);
    // Whole, it reads back.
    await writeFile(file, text);
    expect(await new FileCursorStore(file).load()).toEqual(record(41));
  });

  it('a record written before the checksum was kept (no checksum field) is read as it is', async () => {
    const file = path.join(dir, 'cursor.json');
    await writeFile(file, JSON.stringify(record(12)) + '\n');
    expect(await new FileCursorStore(file).load()).toEqual(record(12));
  });

  it('every field of a full record survives the checksum: optional ones, operations, text outside ASCII', async () => {
    const file = path.join(dir, 'cursor.json');
    const full: DurableRecord = {
      ...record(3, 'S\u00e9-\u{1F680}'),
      lossy: true,
      hubSnapshotOpen: true,
      displacedSession: 'old',
      appliedPastCursor: [{ deploymentId: 'd', revision: 4, seq: 5, withdrawn: true }],
      operations: [
        {
          operationId: 'op',
          startId: 's',
          kind: 'node.drain',
          deadline: 1_765_000_000_123.5,
          acceptedAt: 1_765_000_000_000,
          state: 'concluded',
          conclusion: { frame: 'result', outcome: 'failed', message: 'line\nbreak "quoted" \u2028' },
          concludedAt: 1_765_000_000_100,
          delivered: false,
          deliveredIn: null,
        },
      ],
    };
    await new FileCursorStore(file).save(full);
    expect(await new FileCursorStore(file).load()).toEqual(full);
  });

  it('concurrent saves are serialized and the newest record wins', async () => {
    const file = path.join(dir, 'cursor.json');
    const store = new FileCursorStore(file);
    await Promise.all([1, 2, 3, 4, 5].map((n) => store.save(record(n))));
    expect(await new FileCursorStore(file).load()).toEqual(record(5));
  });

  it('a save records the state at the time of the call, whatever the caller does afterwards', async () => {
    const store = new FileCursorStore(path.join(dir, 'cursor.json'));
    const r = record(1);
    const saving = store.save(r);
    r.cursor = 99;
    await saving;
    expect((await store.load())?.cursor).toBe(1);
  });
});

describe('MemoryCursorStore', () => {
  it('keeps a copy, not a reference', async () => {
    const store = new MemoryCursorStore();
    const r = record(1);
    await store.save(r);
    r.cursor = 5;
    expect((await store.load())?.cursor).toBe(1);
    expect(store.saves).toBe(1);
  });
});
