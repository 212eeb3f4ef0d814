/**
 * A flood of `operation.start` frames: each start is made durable before its handler runs, and
 * the record it is saved in holds the cursor and every operation record. Applied one at a time,
 * each start waited for a save of its own: N starts cost N saves of a record growing to N
 * records, O(N²) bytes written and fsynced (1,000 starts: 2,000 saves, 220 MiB, 20 s here).
 * Starts that arrive while a save is written now share the next one (group commit), and still
 * run, are accepted and are acknowledged only once a save holding them completed.
 *
 * Real file stores in a temporary directory (cursor.json written, fsynced and renamed); the first
 * save of the flood is held, so every start arrives while it is written. Before the fix: one save
 * per start (`saves` ≥ N).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DurableRecord } from '../../../src/operator/cursor-store';
import { openFileStores } from '../../../src/operator/file-stores';
import { applied, type OperatorHandlers } from '../../../src/operator/handlers';
import type { Payload } from '../../../src/protocol';
import { ackAll, desiredPayload, makeClient, type TestClient } from './support/harness';
import { openSession, operationStart } from './support/operations';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

const N = 100;
/** Generous: one save per start (the defect) takes seconds on a busy disk. A hang bound, not a timing check. */
const SETTLE_MS = 20_000;

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = mkdtempSync(path.join(tmpdir(), 'wingsmith-start-flood-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The state directory's cursor.json as a crash would leave it now. */
function onDisk(): DurableRecord {
  return JSON.parse(readFileSync(path.join(dir, 'cursor.json'), 'utf8')) as DurableRecord;
}

/** A client on real file stores whose cursor.json saves are counted and can be held. */
async function floodClient(handlers: Partial<OperatorHandlers>) {
  const stores = await openFileStores(dir);
  const store = stores.cursorStore;
  const save = store.save.bind(store);
  const disk = { saves: 0, bytes: 0, held: 0, gate: null as Promise<void> | null, open: () => {} };
  store.save = async (record) => {
    disk.saves++;
    disk.bytes += JSON.stringify(record).length + 1;
    if (disk.gate) {
      disk.held++;
      await disk.gate;
    }
    return save(record);
  };
  const hold = () => (disk.gate = new Promise<void>((r) => (disk.open = r)));
  const release = () => {
    disk.gate = null;
    disk.open();
  };
  const t = makeClient(hub, { ...stores, handlers });
  clients.push(t);
  const conn = await openSession(hub, t, 'S1');
  await conn.seen((f) => f.type === 'link.stats', 'link.stats');
  ackAll(conn);
  await eventually(() => t.client.stats.unacked === 0, 'everything acked');
  return { t, conn, disk, hold, release };
}

/** Send N starts back to back while the first save of them is held; wait until all were read. */
async function flood(t: TestClient, conn: HubConnection, disk: { held: number }, hold: () => void) {
  const framesIn = t.client.stats.framesIn;
  hold();
  const starts: Payload<'operation.start'>[] = [];
  const seqs: number[] = [];
  for (let i = 0; i < N; i++) {
    const p = operationStart(t.timers.now());
    starts.push(p);
    seqs.push(conn.sendSeq('operation.start', p).seq);
  }
  await eventually(() => disk.held > 0 && t.client.stats.framesIn >= framesIn + N, 'every start read, a save held');
  // Let what was read be applied as far as it goes while the save is held.
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  return { starts, seqs };
}

describe('a flood of operation.start frames', () => {
  it('shares saves (a handful, not one per start), and each handler runs only once its record is on disk', async () => {
    const ran: { id: string; onDisk: boolean }[] = [];
    const { t, conn, disk, hold, release } = await floodClient({
      operation: (p) => {
        ran.push({ id: p.operation_id, onDisk: onDisk().operations.some((o) => o.operationId === p.operation_id) });
        return { outcome: 'succeeded', message: 'done' };
      },
    });
    const before = { saves: disk.saves, bytes: disk.bytes };
    const { starts, seqs } = await flood(t, conn, disk, hold);

    // Nothing of the flood is durable yet: no handler ran, none was accepted or acknowledged.
    expect({
      ran: ran.length,
      accepted: conn.frames.filter((f) => f.type === 'operation.accepted').length,
      ackBelowFlood: conn.highestAck < (seqs[0] as number),
    }).toEqual({ ran: 0, accepted: 0, ackBelowFlood: true });

    release();
    await eventually(() => t.client.session.cursor >= (seqs[N - 1] as number) && ran.length === N, 'every start applied and run', SETTLE_MS);
    await eventually(() => conn.frames.filter((f) => f.type === 'operation.result').length === N, 'every result', SETTLE_MS);

    // In seq order, each on disk before it ran.
    expect(ran.map((r) => r.id)).toEqual(starts.map((s) => s.operation_id));
    expect(ran.filter((r) => !r.onDisk)).toEqual([]);
    const accepted = conn.frames.filter((f) => f.type === 'operation.accepted');
    expect(accepted.map((f) => f.payload.operation_id)).toEqual(starts.map((s) => s.operation_id));
    // Group commit: the starts read while one save was written share the next one. One per start
    // (N of them, each of every record so far) was the defect.
    const saves = disk.saves - before.saves;
    expect(saves, `${saves} saves, ${disk.bytes - before.bytes} bytes for ${N} starts`).toBeLessThan(N / 10);
  });

  it('a frame of another type behind the starts waits for them: applied after every handler started', async () => {
    const order: string[] = [];
    const { t, conn, disk, hold, release } = await floodClient({
      operation: () => {
        order.push('operation');
        return new Promise(() => {});
      },
      desired: () => {
        order.push('desired');
        return applied();
      },
    });
    const { seqs } = await flood(t, conn, disk, hold);
    const desired = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t.client.stats.framesIn > 0 && disk.held > 0, 'held');
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);

    release();
    await eventually(() => t.client.session.cursor >= desired.seq, 'every frame applied', SETTLE_MS);
    expect(order).toEqual([...seqs.map(() => 'operation'), 'desired']);
    // Recorded running, all of them, before any was acknowledged.
    expect(onDisk().operations.filter((o) => o.state === 'running')).toHaveLength(N);
  });
});
