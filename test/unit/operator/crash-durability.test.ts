/**
 * The operator's durable state across a crash, with real files (FileCursorStore, FileOutboundLog).
 * A crash is a client abandoned while its cursor save hangs between the temp file's write and the
 * rename (the store's hook), so nothing after that point reaches the disk or the socket. Found by a
 * review of the durable stores, each confirmed here before the fix:
 * - the record and the outbound log were made durable in parallel, so the log could keep a frame
 *   carrying an ack or a conclusion the record never saved (a replay acked a cursor the restarted
 *   process rewound below; an operation was concluded "succeeded" from the log and "failed" from
 *   the record);
 * - an operation's handler started before its record was saved, so a crash in between ran it twice;
 * - a process that was lossy and stopped before a fresh session left a log header (file log) or a
 *   clean record (in-memory buffer) that let the next process resume.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore, emptyRecord } from '../../../src/operator/cursor-store';
import { applied, permanent, transient, type HandlerResult, type OperationContext } from '../../../src/operator/handlers';
import { FileOutboundLog, MemoryOutboundLog } from '../../../src/operator/outbound-log';
import { newId, type Payload } from '../../../src/protocol';
import { ackAll, desiredPayload, makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-crash-durability-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  // Retried: one CI run failed here with ENOTEMPTY, a file created in the directory while it was
  // being removed, after both clients' stops had resolved (the writer not traced; see the note of
  // stop 50). Node's rm retries ENOTEMPTY with a growing delay.
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

const cursorPath = () => path.join(dir, 'cursor.json');
const logPath = () => path.join(dir, 'outbound.log');

/** A cursor store whose saves "crash" (hang before the rename) once armed. */
function crashableStore() {
  const ctl = { armed: false, hung: 0 };
  const store = new FileCursorStore(cursorPath(), {
    afterTempWrite: async () => {
      if (!ctl.armed) return;
      ctl.hung++;
      await new Promise<void>(() => {}); // the process died here
    },
  });
  return { store, ctl };
}

function manualOperation() {
  const running: { payload: Payload<'operation.start'>; ctx: OperationContext; finish: (o: 'succeeded' | 'failed') => void }[] = [];
  const handler = (payload: Payload<'operation.start'>, ctx: OperationContext) =>
    new Promise<{ outcome: 'succeeded' | 'failed' | 'cancelled'; message: string }>((resolve) => {
      running.push({ payload, ctx, finish: (outcome) => resolve({ outcome, message: outcome }) });
    });
  return { running, handler };
}

function opStart(now: number): Payload<'operation.start'> {
  return {
    operation_id: newId(),
    kind: 'node.drain',
    target: 'node-a',
    params: { grace_period_s: 30 },
    deadline: new Date(now + 600_000).toISOString(),
  };
}

/** First process: open S1, stream the snapshot, everything acked. Returns the hub's ack. */
async function openSettled(t: TestClient): Promise<{ conn: HubConnection; acked: number }> {
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1', full_resync: true });
  await readResync(conn);
  await conn.seen((f) => f.type === 'link.stats', 'link.stats');
  const acked = ackAll(conn);
  await eventually(() => t.client.stats.unacked === 0, 'everything acked');
  return { conn, acked };
}

const settle = () => new Promise((r) => setTimeout(r, 150));

describe('operations across a crash', () => {
  it('an operation is recorded before its handler runs: a crash before the record is saved runs it once, in the next process', async () => {
    const { store, ctl } = crashableStore();
    const op1 = manualOperation();
    const first = makeClient(hub, { cursorStore: store, outboundLog: await FileOutboundLog.open(logPath()), handlers: { operation: op1.handler } });
    const { conn, acked } = await openSettled(first);

    ctl.armed = true; // from here no cursor save completes: the process is about to die
    const payload = opStart(first.timers.now());
    const { id } = conn.sendSeq('operation.start', payload);
    await eventually(() => ctl.hung > 0, 'the record save under way');
    await settle();
    expect(op1.running).toHaveLength(0);
    expect(conn.frames.some((f) => f.type === 'operation.accepted')).toBe(false);
    conn.terminate(); // crash

    const op2 = manualOperation();
    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), handlers: { operation: op2.handler } });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', resume_from: 0, lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    conn2.seqFrom(1);
    conn2.sendSeq('operation.start', payload, { id });
    await eventually(() => op2.running.length === 1, 'the handler running in the second process');
    await conn2.nextOf('operation.accepted');
    expect(op1.running.length + op2.running.length).toBe(1);
  });

  it('a conclusion never reaches the outbound log before the record: after a crash the operation is concluded one way', async () => {
    const { store, ctl } = crashableStore();
    const op1 = manualOperation();
    const first = makeClient(hub, { cursorStore: store, outboundLog: await FileOutboundLog.open(logPath()), handlers: { operation: op1.handler } });
    const { conn } = await openSettled(first);
    const payload = opStart(first.timers.now());
    conn.sendSeq('operation.start', payload);
    await eventually(() => op1.running.length === 1, 'running');
    await conn.nextOf('operation.accepted');
    first.timers.advance(100); // the ack delay: the cursor is saved, then acked
    await eventually(() => first.client.session.durableCursor >= 1, 'the start durably processed');
    const acked = ackAll(conn);
    await eventually(() => first.client.stats.unacked === 0, 'accepted acked');

    ctl.armed = true;
    op1.running[0]!.finish('succeeded');
    await eventually(() => ctl.hung > 0, 'the record save under way');
    await settle();
    expect(await readFile(logPath(), 'utf8')).not.toContain('operation.result');
    conn.terminate(); // crash

    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()) });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    await eventually(() => conn2.frames.some((f) => f.type === 'stream.end'), 'the second process settled (its snapshot ended)');
    await settle();
    const outcomes = conn2.frames.filter((f) => f.type === 'operation.result' && f.payload.operation_id === payload.operation_id).map((f) => f.payload.outcome);
    expect(new Set(outcomes)).toEqual(new Set(['failed']));
  });

  it('no frame in the outbound log carries an ack the record has not saved', async () => {
    const { store, ctl } = crashableStore();
    const first = makeClient(hub, { cursorStore: store, outboundLog: await FileOutboundLog.open(logPath()) });
    const { conn } = await openSettled(first);
    ctl.armed = true;
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => first.client.session.cursor >= 1, 'applied');
    first.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await eventually(() => ctl.hung > 0, 'the record save under way');
    await settle();
    conn.terminate(); // crash
    const saved = JSON.parse(await readFile(cursorPath(), 'utf8')) as { cursor: number };
    const logged = (await readFile(logPath(), 'utf8')).match(/"ack":(\d+)/g) ?? [];
    const acks = logged.map((m) => Number(m.slice(6)));
    expect(Math.max(0, ...acks)).toBeLessThanOrEqual(saved.cursor);
  });
});

/**
 * A cluster whose revision 5 of D fails once (a hole at seq 1) while revision 6 is still being
 * rendered when the link drops: the first process is left in its backoff with 6 unfinished.
 */
async function holeBehindSlowSix() {
  // The cluster's own state: which revision of D is rendered now.
  const cluster = { rendered: 0, finishSix: () => undefined as void };
  let failedOnce = false;
  const desiredResult = (p: { revision: number }): HandlerResult | Promise<HandlerResult> => {
    if (p.revision === 5 && !failedOnce) {
      failedOnce = true;
      return transient('api server busy');
    }
    if (p.revision === 6 && cluster.rendered === 0) {
      return new Promise<HandlerResult>((resolve) => (cluster.finishSix = () => ((cluster.rendered = 6), resolve(applied()))));
    }
    cluster.rendered = p.revision;
    return applied();
  };
  const first = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult });
  const { conn, acked } = await openSettled(first);
  const f1 = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
  const f2 = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
  await eventually(() => first.calls.desired.length === 2, 'both frames handed to the handler');
  conn.terminate();
  await eventually(() => first.client.state === 'waiting', 'the first process in its backoff');
  /** The next process resumes S1 and the hub replays both frames from 0; resolves once both are settled. */
  const nextProcessReplays = async () => {
    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0, lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: f1.id! });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: f2.id! });
    await eventually(() => second.client.session.cursor >= 2 || undefined, 'both replayed frames settled');
    return second;
  };
  return { cluster, first, nextProcessReplays };
}

describe('desired revisions across a crash', () => {
  it('a revision applied behind a hole after the link dropped is saved at once: a crash during the backoff does not let the next process render the older one over it', async () => {
    const { cluster, first, nextProcessReplays } = await holeBehindSlowSix();
    cluster.finishSix();
    expect(first.client.session.cursor).toBe(0); // the hole at seq 1 holds the cursor
    // The cluster renders revision 6 now: the record must say so before the process can die.
    const savedSix = () => {
      const r = JSON.parse(readFileSync(cursorPath(), 'utf8')) as { appliedPastCursor?: { deploymentId: string; revision: number }[] };
      return r.appliedPastCursor?.some((e) => e.deploymentId === 'D' && e.revision === 6);
    };
    await eventually(savedSix, 'revision 6 in the saved record');
    // The crash, during the backoff: the next process resumes S1 and the hub replays from 0.

    const second = await nextProcessReplays();
    // The cluster had revision 6; it must never be rendered back to revision 5.
    expect(second.calls.desired.map((c) => c.payload.revision)).not.toContain(5);
    expect(cluster.rendered).toBe(6);
  });
});

describe('desired revisions across a crash before the cursor is saved', () => {
  it('a newer revision applied over one still above the saved cursor is saved at once: the next process does not render the older one over it', async () => {
    // No hole: revisions 5 and 6 of D both apply, but the cursor that passes them is saved only
    // when the ack goes out (ackDelayMs, never here: the timers are manual), or not at all while
    // the link is down. A replay from the cursor on disk delivers revision 5 again.
    let rendered = 0;
    const desiredResult = (p: { revision: number }): HandlerResult => ((rendered = p.revision), applied());
    const saving = { inFlight: 0 };
    class CountingStore extends FileCursorStore {
      override async save(record: Parameters<FileCursorStore['save']>[0]): Promise<void> {
        saving.inFlight++;
        try {
          await super.save(record);
        } finally {
          saving.inFlight--;
        }
      }
    }
    const first = makeClient(hub, { cursorStore: new CountingStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult });
    const { conn, acked } = await openSettled(first);
    const f1 = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const f2 = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => first.client.session.cursor >= 2, 'both applied');
    expect(rendered).toBe(6);
    await eventually(() => saving.inFlight === 0, 'no save under way');
    conn.terminate(); // crash

    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    const from = hello.payload.resume_from as number;
    if (from < 1) conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: f1.id! });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: f2.id! });
    await eventually(() => second.client.session.cursor >= 2 || undefined, 'the replay settled');
    // The cluster had revision 6; it must never be rendered back to revision 5.
    expect(second.calls.desired.map((c) => c.payload.revision)).not.toContain(5);
    expect(rendered).toBe(6);
  });
});

describe('desired revisions across a graceful stop during an outage', () => {
  it('the stop waits for a desired handler still running, so the revision it applies behind a hole is in the final record', async () => {
    const { cluster, first, nextProcessReplays } = await holeBehindSlowSix();

    // A graceful stop while the hub is unreachable and the cluster is still taking revision 6.
    const stopping = first.client.stop({ graceful: true });
    await Promise.race([stopping, settle()]);
    cluster.finishSix();
    await stopping;

    const second = await nextProcessReplays();
    // The cluster had revision 6 when the first process stopped; it must never go back to 5.
    expect(second.calls.desired.map((c) => c.payload.revision)).not.toContain(5);
    expect(cluster.rendered).toBe(6);
  });
});

describe('a batch whose record save failed', () => {
  it("never reaches the outbound log, not even through the stop's final rewrite", async () => {
    // The cursor file's disk fails (ENOSPC) while the log's still takes a write: the batch's save
    // fails, so the batch is never synced; the stop's save fails too, and its compaction of the log
    // must not commit what the record cannot back.
    const ctl = { failing: false, failed: 0 };
    const store = new FileCursorStore(cursorPath(), {
      afterTempWrite: () => {
        if (!ctl.failing) return;
        ctl.failed++;
        throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      },
    });
    const first = makeClient(hub, { cursorStore: store, outboundLog: await FileOutboundLog.open(logPath()) });
    const { conn, acked } = await openSettled(first);
    ctl.failing = true;
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => first.client.session.cursor >= 1, 'applied');
    first.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await eventually(() => ctl.failed > 0, 'the failed save');
    await conn.waitClosed();
    await first.client.stop({ graceful: false });

    const saved = JSON.parse(await readFile(cursorPath(), 'utf8')) as { cursor: number };
    const logged = (await readFile(logPath(), 'utf8')).match(/"ack":(\d+)/g) ?? [];
    expect(Math.max(0, ...logged.map((m) => Number(m.slice(6))))).toBeLessThanOrEqual(saved.cursor);

    // The next process resumes from what the record and the log agree on, numbering on from the
    // last frame the hub can have seen.
    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()) });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: saved.cursor });
    expect(second.client.session.outbound?.nextSeq).toBe(acked + 1);
  });
});

describe('a lossy verdict survives a process that never reached the hub', () => {
  it('a file log that could not vouch for itself: the next start after a stop says lossy too', async () => {
    const log0 = await FileOutboundLog.open(logPath());
    log0.bindSession('S1');
    await log0.sync();
    const frame = (seq: number) => JSON.stringify({ v: 1, type: 'node.event', seq, payload: { note: `original ${seq}` } });
    for (let s = 1; s <= 5; s++) log0.append({ seq: s, frame: frame(s), bytes: Buffer.byteLength(frame(s)) });
    await log0.sync();
    await log0.close();
    await new FileCursorStore(cursorPath()).save({ ...emptyRecord(), sessionId: 'S1', cursor: 3, outbound: { nextSeq: 6, peerAck: 0, lostThrough: 0 } });
    // Corruption inside a committed batch (power loss, bit rot): the log cannot vouch for frame 2.
    const text = await readFile(logPath(), 'utf8');
    await writeFile(logPath(), text.replace('original 2', 'originaX 2'));

    const b = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()) });
    await b.client.start();
    expect((await (await hub.nextConnection()).nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
    await b.client.stop({ graceful: true }); // the hub never answered

    const c = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()) });
    clients.push(c);
    await c.client.start();
    expect((await (await hub.nextConnection()).nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
  });

  it('an in-memory buffer: a lossy process that stops gracefully does not record a clean stop', async () => {
    const store = new FileCursorStore(cursorPath());
    const a = makeClient(hub, { cursorStore: store, outboundLog: new MemoryOutboundLog() });
    const { conn } = await openSettled(a);
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => a.client.session.cursor >= 1, 'applied');
    a.timers.advance(100); // the ack delay: the cursor is saved, then acked
    await eventually(() => a.client.session.durableCursor >= 1, 'cursor saved');
    // A report numbered after that save, then the crash: the record cannot vouch for it.
    a.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await conn.nextOf('node.observed');
    conn.terminate();

    const b = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: new MemoryOutboundLog() });
    await b.client.start();
    expect((await (await hub.nextConnection()).nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
    await b.client.stop({ graceful: true }); // the hub never answered
    expect(JSON.parse(await readFile(cursorPath(), 'utf8')).clean).toBe(false);

    const c = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: new MemoryOutboundLog() });
    clients.push(c);
    await c.client.start();
    expect((await (await hub.nextConnection()).nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
  });
});

describe('torn files never stop a start', () => {
  it('a truncated cursor.json and a torn log tail start fresh, not a throw', async () => {
    const log0 = await FileOutboundLog.open(logPath());
    log0.bindSession('S1');
    await log0.sync();
    const f = JSON.stringify({ v: 1, type: 'node.event', seq: 1, payload: {} });
    log0.append({ seq: 1, frame: f, bytes: f.length });
    await log0.sync();
    await log0.close();
    await writeFile(logPath(), (await readFile(logPath(), 'utf8')) + 'F\t2\tdeadbe');
    await new FileCursorStore(cursorPath()).save({ ...emptyRecord(), sessionId: 'S1', cursor: 3 });
    const whole = await readFile(cursorPath(), 'utf8');
    await writeFile(cursorPath(), whole.slice(0, whole.length >> 1));
    const t = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()) });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    const hello = await conn.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: null });
  });
});

describe('answers across a stop', () => {
  it('a refusal still waiting to be written is not lost with the process: the cursor saved never passes the frame it answers', async () => {
    // The hub's window is full (it has not acknowledged the operator's reports), so the error
    // answering a refused deployment.desired waits in memory while the frame itself is processed.
    const refuse = () => permanent('gpu model not in this cluster');
    const first = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult: refuse });
    await first.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true, limits: { replay_buffer_frames: 8 } });
    await readResync(conn);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    const acked = ackAll(conn);
    await eventually(() => first.client.stats.unacked === 0, 'everything acked');
    for (let i = 0; i < 8; i++) first.client.reportNode({ ...SNAPSHOT.nodes[0]!, node_id: `node-${i}`, name: `node-${i}` });
    await eventually(() => first.client.stats.unacked === 8, 'the window full');

    const { id } = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => first.calls.desired.length === 1 && first.client.session.cursor >= 1, 'd1 refused');
    expect(conn.frames.some((f) => f.type === 'error' && f.reply_to === id)).toBe(false);
    await first.client.stop({ graceful: false });

    // The next process continues the session; the hub replays whatever follows resume_from.
    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath()), outboundLog: await FileOutboundLog.open(logPath()), desiredResult: refuse });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    conn2.seqFrom((hello.payload.resume_from as number) + 1);
    if ((hello.payload.resume_from as number) < 1) conn2.sendSeq('deployment.desired', desiredPayload('d1'), { id });
    await conn2.seen((f) => f.type === 'error' && f.reply_to === id, 'the error answering d1');
  });
});
