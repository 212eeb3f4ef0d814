/**
 * What this file proves: no text an operator writes can make the hub's record of a frame it
 * cannot apply unrecordable, and no such record can wedge the stream.
 *
 * Before: a 256-character unknown type ending in an emoji was cut by UTF-16 units into a lone
 * surrogate; lone surrogates also arrived directly (in a type, a non-ULID id, a validator's
 * reason quoting a key). JSON.stringify writes one as `\ud800`, jsonb refuses it (22P02,
 * permanent), and the frame's rejection was queued again unchanged, refused again, never acked:
 * 1013 after the hole timeout, a replay, and the same again, forever.
 *
 * Now every text of a rejection is made storable (cut between code points, NUL and lone
 * surrogates as U+FFFD), and a rejection the database refuses anyway is recorded more plainly
 * (ASCII only, then not at all) instead of being queued unchanged: the poison path always ends in
 * an acknowledgement.
 *
 * Spec: "Unknown type values are never fatal ... The frame is dropped, and the receiver answers
 * with an error naming the type"; "A dropped frame is still counted ... must still advance its
 * arrival expectation for that seq and acknowledge it"; "Poison frames": "A permanently
 * unappliable frame is therefore accepted, discarded, and logged loudly". MESSAGES: type is "a
 * string of 1–256 characters" (characters are code points).
 */
import { describe, expect, it } from 'vitest';
import type { Sql } from '../../src/hub/db/sql';
import type { Logger, LogFields } from '../../src/hub/log';
import { type InboundItem } from '../../src/hub/session/ingest-batch';
import { asciiText, storableText } from '../../src/hub/storable-text';
import { IngestPipeline } from '../../src/hub/session/ingest-pipeline';
import { newId } from '../../src/protocol';
import { LIMITS } from '../../src/protocol/vocabulary';
import { fixture, frameFrom } from '../support/fixtures';
import { node, useHub } from './support/hub';

const h = useHub();

/** The frame's envelope id as written by frameFrom, so a test can find the hub's answer to it. */
const idOf = (text: string): string => (JSON.parse(text) as { id: string }).id;

describe('unknown types and rejections with non-BMP text and lone surrogates', () => {
  it('an unknown type of 256 characters ending in an emoji is acknowledged, recorded whole, and the stream behind it advances', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // 255 ASCII + one astral character = 256 characters (257 UTF-16 units): a valid type name of
    // a newer operator. A cut by UTF-16 units kept a lone high surrogate of it.
    const type = `x.${'a'.repeat(253)}😀`;
    const text = frameFrom(fixture('node.observed'), { seq: 1, ack: peer.hubCursor });
    peer.sendRaw(JSON.stringify({ ...JSON.parse(text), type }));
    peer.nextSeq = 2;
    peer.send('node.observed', node('n-after'));
    await peer.ackedThrough(2, 8_000);
    expect(await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n-after' }]);
    expect(await h.sql('select seq, type from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', type }]);
    const answer = await peer.next((f) => f.type === 'error' && f.reply_to === idOf(text));
    expect(answer.payload).toMatchObject({ retryable: false, unknown_type: type });
    peer.close();
  });

  it('an unknown type carrying a lone surrogate is acknowledged, recorded with U+FFFD, and the stream behind it advances', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const text = frameFrom(fixture('node.observed'), { seq: 1, ack: peer.hubCursor });
    peer.sendRaw(JSON.stringify({ ...JSON.parse(text), type: 'future.\ud800thing' }));
    peer.nextSeq = 2;
    peer.send('node.observed', node('n-after'));
    await peer.ackedThrough(2, 8_000);
    expect(peer.isClosed).toBe(false);
    expect(await h.sql('select type from rejections where cluster_uid = $1', [c.uid])).toEqual([{ type: 'future.\uFFFDthing' }]);
    peer.close();
  });

  it('a poison frame whose id is not a ULID and carries a lone surrogate is recorded and acknowledged', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const text = frameFrom(fixture('node.observed'), { seq: 1, ack: peer.hubCursor, payload: node('n1') });
    peer.sendRaw(JSON.stringify({ ...JSON.parse(text), id: 'bad\ud800id' }));
    peer.nextSeq = 2;
    peer.send('node.observed', node('n-after'));
    await peer.ackedThrough(2, 8_000);
    expect(await h.sql('select seq, frame_id from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', frame_id: 'bad\uFFFDid' }]);
    peer.close();
  });

  it("a poison frame whose validator's reason quotes a label key with a lone surrogate is recorded and acknowledged", async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // A label value over its limit: the reason names the field by its path, the key included.
    const badId = peer.send('node.observed', { ...node('n1'), labels: { 'k\udc00': 'v'.repeat(LIMITS.labelValue + 1) } });
    peer.send('node.observed', node('n-after'));
    await peer.ackedThrough(2, 8_000);
    expect(await h.sql('select seq, frame_id, reason from rejections where cluster_uid = $1', [c.uid])).toEqual([
      { seq: '1', frame_id: badId, reason: expect.stringContaining('labels.k\uFFFD') },
    ]);
    expect(await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n-after' }]);
    const answer = await peer.next((f) => f.type === 'error' && f.reply_to === badId);
    expect(answer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringContaining('labels.k\uFFFD') });
    peer.close();
  });
});

describe('storableText: operator text as Postgres text and jsonb can hold it', () => {
  it('cuts between code points: an emoji is kept whole or dropped whole, never halved', () => {
    expect(storableText(`${'a'.repeat(255)}😀`, 256)).toBe(`${'a'.repeat(255)}😀`);
    expect(storableText(`${'a'.repeat(255)}😀b`, 256)).toBe(`${'a'.repeat(255)}😀`);
    expect(storableText('😀😀😀', 2)).toBe('😀😀');
  });

  it('replaces NUL and lone surrogates (high, low, at either end) with U+FFFD, and nothing else', () => {
    expect(storableText('a\u0000b', 10)).toBe('a\uFFFDb');
    expect(storableText('\ud800x\udc00', 10)).toBe('\uFFFDx\uFFFD');
    expect(storableText('x\ud83d', 10)).toBe('x\uFFFD');
    expect(storableText('\udc00\ud800', 10)).toBe('\uFFFD\uFFFD');
    expect(storableText('é€😀 ok', 10)).toBe('é€😀 ok');
  });

  it('leaves nothing jsonb refuses, and is idempotent', () => {
    const awkward = ['\ud800', '\udbff\udbff', 'a\u0000', '😀'.slice(0, 1), '\udfff😀\ud83d', 'plain'];
    for (const s of awkward) {
      const once = storableText(s, 256);
      expect(JSON.stringify(once)).not.toMatch(/\\u(d[89a-f][0-9a-f]{2}|0000)/i);
      expect(storableText(once, 256)).toBe(once);
    }
  });

  it('asciiText escapes everything outside printable ASCII and never splits an escape', () => {
    expect(asciiText('a\ud800😀\u0000b', 100)).toBe('a\\ud800\\ud83d\\ude00\\u0000b');
    expect(asciiText('ab😀', 4)).toBe('ab');
    expect(asciiText('ab😀', 8)).toBe('ab\\ud83d');
  });
});

describe('the poison path always ends in an acknowledgement', () => {
  /** A database that refuses (22P02, permanent) every statement that writes anything at all. */
  function refusingEverything() {
    const statements: unknown[][] = [];
    const sql: Sql = {
      async query<R>(_text: string, params: unknown[] = []) {
        statements.push(params);
        // Refuses any statement that carries something: a table's rows that are not `[]` (the
        // restore check's two numbers, last, carry nothing to refuse).
        if (params.slice(4).some((p) => typeof p === 'string' && p !== '[]')) {
          throw Object.assign(new Error('invalid input syntax for type json'), { code: '22P02' });
        }
        return { rows: [{ fenced: true, pruned: 0, unknown_ops: [] }] as R[], rowCount: 1 };
      },
    };
    return { sql, statements };
  }

  function recordingLogger(lines: { level: string; msg: string; fields?: LogFields }[]): Logger {
    const log = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, ...(fields ? { fields } : {}) });
    const logger: Logger = { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error'), child: () => logger };
    return logger;
  }

  function pipelineOver(sql: Sql, lines: { level: string; msg: string }[]) {
    const committed: InboundItem[][] = [];
    const pipeline = new IngestPipeline(
      {
        sql,
        fence: () => ({ clusterUid: 'c', sessionId: 's', generation: 1, tokenHash: '00' }),
        resyncs: () => ({}),
        sentDesired: () => null,
        committed: (items) => void committed.push(items),
        commitFailed: (err) => {
          throw err;
        },
        wentBack: () => {
          throw new Error('went back');
        },
        fenceLost: () => {
          throw new Error('fence lost');
        },
        keepRetrying: () => true,
        outcomeUnknown: () => undefined,
        log: recordingLogger(lines),
      },
      100,
    );
    return { pipeline, committed };
  }

  async function until(what: () => boolean, ms = 2_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!what()) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  it('a frame whose rejection the database refuses steps down (ASCII, then unrecorded) and is settled; no refusal queues the same item again', async () => {
    const db = refusingEverything();
    const lines: { level: string; msg: string }[] = [];
    const p = pipelineOver(db.sql, lines);
    const frame = { seq: 1, id: newId(), replyTo: null, type: 'node.observed', arrivedAt: Date.now() };
    p.pipeline.push({ ...frame, kind: 'message', message: { type: 'node.observed', payload: node('n\u0000') } } as InboundItem);
    await until(() => p.committed.length > 0);
    expect(p.committed.map((items) => items.map((i) => [i.seq, i.kind, i.record]))).toEqual([[[1, 'poison', 'none']]]);
    // The frame, its rejection, its ASCII rejection, then nothing: each statement differs from the last.
    expect(db.statements).toHaveLength(4);
    const carried = db.statements.map((params) => JSON.stringify(params.slice(4)));
    expect(new Set(carried).size).toBe(4);
    expect(carried[2]).toMatch(/reduced to ASCII/);
    expect(lines.filter((l) => l.level === 'error').map((l) => l.msg)).toEqual([
      'POISON FRAME: database refused it; recording rejection',
      'POISON FRAME: database refused its rejection record; recording it reduced to ASCII',
      'POISON FRAME: database refused even its ASCII rejection record; acknowledged and dropped UNRECORDED',
    ]);
    await p.pipeline.quiesce();
  });

  it('an unknown type whose record is refused is recorded in ASCII, the operator text escaped', async () => {
    const recorded: string[] = [];
    const sql: Sql = {
      async query<R>(_text: string, params: unknown[] = []) {
        const rejections = String(params[15] ?? '[]');
        // Refuses anything that is not plain ASCII (as a database with a stricter encoding might).
        if (/[^\x20-\x7e]/.test(JSON.parse(rejections).map((r: { type: string; reason: string }) => r.type + r.reason).join(''))) {
          throw Object.assign(new Error('character has no equivalent in encoding'), { code: '22P05' });
        }
        recorded.push(rejections);
        return { rows: [{ fenced: true, pruned: 0, unknown_ops: [] }] as R[], rowCount: 1 };
      },
    };
    const p = pipelineOver(sql, []);
    p.pipeline.push({ seq: 1, id: newId(), replyTo: null, type: 'future.😀', arrivedAt: Date.now(), kind: 'unknown' });
    await until(() => p.committed.length > 0);
    expect(recorded).toHaveLength(1);
    expect(JSON.parse(recorded[0] as string)).toMatchObject([{ seq: 1, type: 'future.\\ud83d\\ude00', answer: false }]);
    await p.pipeline.quiesce();
  });

  it('a statement that writes nothing and is still refused "permanently" is retried with backoff, not spun on', async () => {
    const statements: number[] = [];
    const sql: Sql = {
      async query() {
        statements.push(Date.now());
        throw Object.assign(new Error('numeric value out of range'), { code: '22003' });
      },
    };
    const p = pipelineOver(sql, []);
    p.pipeline.push({ seq: 1, id: newId(), replyTo: null, type: 'future.thing', arrivedAt: Date.now(), kind: 'unknown', record: 'none' });
    await new Promise((r) => setTimeout(r, 400));
    await p.pipeline.quiesce();
    // 50, 100, 200 ms of backoff: a handful of statements, where a re-queue without backoff made thousands.
    expect(statements.length).toBeGreaterThan(1);
    expect(statements.length).toBeLessThan(10);
    expect(p.committed).toEqual([]);
  });
});
