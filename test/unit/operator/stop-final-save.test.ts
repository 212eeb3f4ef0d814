/**
 * The stop's save is the client's last write to its state directory. stop() resolves after it and
 * gives the directory's lock up, so a record or log write after that could land on the state of
 * the process that took the directory over. Found in CI (two cleanups of a state directory hit
 * ENOTEMPTY after the clients' stops had resolved): a save asked for while the stop's final save
 * was being written (an operation concluding during a non-graceful stop) was queued behind it and
 * written after the stop resolved. Now it is written before the stop resolves, and nothing after.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore, emptyRecord } from '../../../src/operator/cursor-store';
import { RecordKeeper } from '../../../src/operator/durable';
import { memoryLogger } from '../../../src/operator/logger';
import { FileOutboundLog } from '../../../src/operator/outbound-log';
import { newId, type Payload } from '../../../src/protocol';
import { ackAll, makeClient, readResync } from './support/harness';
import { GatedStore } from './support/operations';
import { eventually, ScriptedHub } from './support/scripted-hub';

describe('RecordKeeper.finalSave', () => {
  it('a save asked for while the final one is written is written before finalSave resolves, and nothing after it', async () => {
    const store = new GatedStore();
    let cursor = 3;
    const keeper = new RecordKeeper(store, memoryLogger(), () => ({ ...emptyRecord(), cursor }));
    store.hold();
    let finalDone = false;
    const final = keeper.finalSave().then(() => (finalDone = true));
    await eventually(() => store.begun === 1, 'the final save under way');
    cursor = 4;
    keeper.markChanged();
    const late = keeper.persist();
    store.release();
    await late;
    // The save asked for late is durable once the final save resolves.
    await final;
    expect(finalDone).toBe(true);
    expect(store.begun).toBe(2);
    expect((await store.load())?.cursor).toBe(4);
    // Sealed: a later persist() writes nothing.
    cursor = 5;
    keeper.markChanged();
    await keeper.persist();
    await new Promise((r) => setTimeout(r, 20));
    expect(store.begun).toBe(2);
    expect(keeper.sealed).toBe(true);
  });

  // Found by a review: when the final save itself failed (a full or failing volume), finalSave
  // rejected at once and the save queued behind it was written afterwards, after the stop had
  // resolved and given the directory's lock up.
  it('when the final save fails, a save asked for meanwhile is still written before finalSave settles, and nothing after it', async () => {
    class FailingOnce extends GatedStore {
      /** Saves that finished writing (the first one then fails). */
      written = 0;
      override async save(record: Parameters<GatedStore['save']>[0]): Promise<void> {
        const first = this.begun === 0;
        await super.save(record);
        await new Promise((r) => setTimeout(r, 5));
        this.written++;
        if (first) throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
      }
    }
    const store = new FailingOnce();
    let cursor = 3;
    const keeper = new RecordKeeper(store, memoryLogger(), () => ({ ...emptyRecord(), cursor }));
    store.hold();
    let settled = false;
    let writtenWhenSettled = -1;
    const final = keeper.finalSave().then(
      () => {
        settled = true;
        writtenWhenSettled = store.written;
      },
      () => {
        settled = true;
        writtenWhenSettled = store.written;
      },
    );
    await eventually(() => store.begun === 1, 'the final save under way');
    cursor = 4;
    keeper.markChanged();
    const late = keeper.persist().catch(() => {});
    store.release();
    await final;
    await late;
    await new Promise((r) => setTimeout(r, 50));
    expect({ settled, writtenWhenSettled, written: store.written, sealed: keeper.sealed }).toEqual({ settled: true, writtenWhenSettled: 2, written: 2, sealed: true });
    // The save after the failed one holds everything: the record is the newest.
    expect((await store.load())?.cursor).toBe(4);
  });

  it('waits for a save under way and is written after it, holding what changed meanwhile', async () => {
    const store = new GatedStore();
    let cursor = 1;
    const keeper = new RecordKeeper(store, memoryLogger(), () => ({ ...emptyRecord(), cursor }));
    store.hold();
    const first = keeper.persist();
    await eventually(() => store.begun === 1, 'a save under way');
    cursor = 2;
    const final = keeper.finalSave();
    store.release();
    await first;
    await final;
    expect(store.begun).toBe(2);
    expect((await store.load())?.cursor).toBe(2);
  });
});

describe('a non-graceful stop with an operation concluding during its final save', () => {
  let hub: ScriptedHub;
  let dir: string;
  beforeEach(async () => {
    hub = await ScriptedHub.start();
    dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-stop-final-save-'));
  });
  afterEach(async () => {
    await hub.stop();
    await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  });

  it('writes nothing to the state directory after stop() resolved, and its record holds the conclusion', async () => {
    // The stop's save waits at the gate while the operation concludes; a save after it is slow
    // (a loaded disk), so one written after stop() resolved is seen here.
    const gate = { closed: false, begun: 0, stopBegun: -1, waiting: [] as (() => void)[] };
    const store = new FileCursorStore(path.join(dir, 'cursor.json'), {
      afterTempWrite: async () => {
        gate.begun++;
        if (gate.closed) await new Promise<void>((r) => gate.waiting.push(r));
        else if (gate.stopBegun >= 0 && gate.begun > gate.stopBegun + 1) await new Promise((r) => setTimeout(r, 200));
      },
    });
    const logPath = path.join(dir, 'outbound.log');
    let finish: (() => void) | null = null;
    const t = makeClient(hub, {
      cursorStore: store,
      outboundLog: await FileOutboundLog.open(logPath),
      handlers: {
        operation: () => new Promise((resolve) => (finish = () => resolve({ outcome: 'succeeded', message: 'done' }))),
      },
    });
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await readResync(conn);
    ackAll(conn);
    const payload: Payload<'operation.start'> = {
      operation_id: newId(),
      kind: 'node.drain',
      target: 'node-a',
      params: { grace_period_s: 30 },
      deadline: new Date(t.timers.now() + 600_000).toISOString(),
    };
    conn.sendSeq('operation.start', payload);
    await conn.nextOf('operation.accepted');
    await eventually(() => finish !== null, 'the handler running');
    t.timers.advance(100); // the ack delay: the start's cursor is saved, then acked
    await eventually(() => t.client.session.durableCursor >= 1, 'the start durably processed');
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'accepted acked');
    await new Promise((r) => setTimeout(r, 100)); // no save under way when the stop begins

    gate.closed = true;
    gate.stopBegun = gate.begun;
    const stopped = t.client.stop({ graceful: false });
    await eventually(() => gate.begun > gate.stopBegun, "the stop's save under way");
    finish!(); // the operation concludes while the final save is written
    // Its conclusion queued (its record changed, and the writer asked for a save), and the turns
    // after it run, before the stop's save is let go.
    await eventually(() => t.client.stats.queued > 0, 'the conclusion queued');
    await new Promise((r) => setTimeout(r, 20));
    gate.closed = false;
    for (const w of gate.waiting.splice(0)) w();
    await stopped;

    const savesAtStop = gate.begun;
    const recordAtStop = await readFile(path.join(dir, 'cursor.json'), 'utf8');
    const logAtStop = await readFile(logPath, 'utf8');
    await new Promise((r) => setTimeout(r, 400));
    expect(gate.begun).toBe(savesAtStop);
    expect(await readFile(path.join(dir, 'cursor.json'), 'utf8')).toBe(recordAtStop);
    expect(await readFile(logPath, 'utf8')).toBe(logAtStop);
    // The conclusion that came during the stop's save is in the record the stop left.
    const record = JSON.parse(recordAtStop) as { operations: { operationId: string; state: string }[] };
    expect(record.operations.find((o) => o.operationId === payload.operation_id)?.state).toBe('concluded');
  });
});
