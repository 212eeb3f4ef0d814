import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OperatorClient } from '../../../src/operator/client';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { applied, permanent, PermanentError, transient, type OperatorHandlers } from '../../../src/operator/handlers';
import { newId, readFrame, type Payload } from '../../../src/protocol';
import { ackAll, cursorReaches, desiredPayload, makeClient, readResync, reconnectAfterBackoff, SNAPSHOT, type TestClient, openWelcomed } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const open = (options: Parameters<typeof makeClient>[1] = {}) => openWelcomed(hub, clients, options);

/** A round trip through the SDK: once the pong is here, every frame it wrote before is too. */
async function sync(conn: HubConnection): Promise<void> {
  const before = conn.frames.filter((f) => f.type === 'pong').length;
  conn.send('ping', {});
  await eventually(() => conn.frames.filter((f) => f.type === 'pong').length > before, 'pong');
}

describe('inbound order', () => {
  it('applies in order and acknowledges with an ack frame when nothing else goes out', async () => {
    const { t, conn } = await open();
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(t, 1);
    t.timers.advance(50);
    const ack = await conn.seen((f) => f.type === 'ack', 'an ack frame');
    expect(ack).toMatchObject({ seq: null, ack: 1, payload: {} });
  });

  it('hands the handler the payload untouched: replica bounds are rendered exactly as sent', async () => {
    const { t, conn } = await open();
    const sent = desiredPayload('d1', 4, { min_replicas: 3, max_replicas: 7 });
    conn.sendSeq('deployment.desired', sent);
    await cursorReaches(t, 1);
    expect(t.calls.desired[0]?.payload).toEqual(sent);
  });

  it('drops a duplicate', async () => {
    const { t, conn } = await open();
    const { id } = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    conn.send('deployment.desired', desiredPayload('d1'), { seq: 1, id });
    await sync(conn);
    await cursorReaches(t, 1);
    expect(t.calls.desired).toHaveLength(1);
    expect(t.client.stats.duplicates).toBe(1);
  });

  it('closes the connection on a gap, and reconnects', async () => {
    const { t, conn } = await open();
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    conn.send('deployment.desired', desiredPayload('d2'), { seq: 3 });
    expect((await conn.waitClosed()).code).toBe(4400);
    expect(t.client.stats.gaps).toBe(1);
    await reconnectAfterBackoff(t);
    const again = await hub.nextConnection();
    expect((await again.nextOf('hello')).payload).toMatchObject({ session_id: 'S1' });
  });

  it('on resume rewinds to cursor + 1, so the replay is applied instead of dropped as duplicates', async () => {
    let failD2 = true;
    const { t, conn } = await open({
      desiredResult: (p) => (p.deployment_id === 'd2' && failD2 ? transient('api server down') : { ok: true }),
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    conn.sendSeq('deployment.desired', desiredPayload('d2'));
    conn.sendSeq('deployment.desired', desiredPayload('d3'));
    await eventually(() => t.calls.desired.length === 3, 'three deliveries');
    await cursorReaches(t, 1);
    // d3 was read and applied past the hole, but the cursor stays behind d2.
    expect(t.client.session.cursor).toBe(1);
    conn.terminate();

    failD2 = false;
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 1 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0 });
    conn2.seqFrom(2);
    conn2.sendSeq('deployment.desired', desiredPayload('d2'));
    conn2.sendSeq('deployment.desired', desiredPayload('d3'));
    await cursorReaches(t, 3);
    // d2 is applied from the replay; d3's replay is read (not a duplicate) and skipped as an
    // already-applied revision, so the cursor passes it.
    expect(t.calls.desired.map((c) => c.payload.deployment_id)).toEqual(['d1', 'd2', 'd3', 'd2']);
    expect(t.client.stats.duplicates).toBe(0);
    expect(t.client.stats.supersededDesired).toBe(1);
    t.timers.advance(50);
    await conn2.seen((f) => f.ack === 3, 'ack 3');
  });
});

describe('handler outcomes', () => {
  it('a transient failure withholds the ack, is retried later, and is acked once it applies', async () => {
    let calls = 0;
    const { t, conn } = await open({ desiredResult: () => (++calls === 1 ? transient('lock held') : { ok: true }) });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => calls === 1, 'first attempt');
    t.timers.advance(50);
    await sync(conn);
    expect(conn.highestAck).toBe(0);
    expect(t.client.stats.transientFailures).toBe(1);

    t.timers.advance(500);
    await eventually(() => calls === 2, 'the retry');
    await cursorReaches(t, 1);
    t.timers.advance(50);
    await conn.seen((f) => f.ack === 1, 'ack 1');
    expect(t.calls.desired[1]?.ctx.attempt).toBe(1);
  });

  it('a thrown exception or an unrecognized outcome counts as transient', async () => {
    let calls = 0;
    const { t, conn } = await open({
      desiredResult: () => {
        calls++;
        if (calls === 1) throw new Error('boom');
        if (calls === 2) return 'ok?' as never;
        return { ok: true };
      },
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => calls === 1, 'first attempt');
    t.timers.advance(500);
    await eventually(() => calls === 2, 'second attempt');
    expect(t.client.session.cursor).toBe(0);
    t.timers.advance(1_000);
    await cursorReaches(t, 1);
  });

  it('a permanent failure is acked, dropped, logged loudly and reported with an error replying to the frame', async () => {
    const { t, conn } = await open({ desiredResult: () => permanent('gpu model B200 does not exist here') });
    const { id } = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.payload).toMatchObject({ code: 'invalid', retryable: false, message: 'gpu model B200 does not exist here' });
    await cursorReaches(t, 1);
    t.timers.advance(50);
    await eventually(() => conn.highestAck === 1, 'ack 1');
    expect(t.logger.records.some((r) => r.level === 'error' && r.seq === 1)).toBe(true);
  });

  it('answers an unknown type with an error naming it, and counts and acks its seq', async () => {
    const { t, conn } = await open();
    const id = newId();
    conn.sendRaw(JSON.stringify({ v: 1, type: 'cluster.weather', id, seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { x: 1 } }));
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.seq).not.toBeNull();
    expect(err.payload).toMatchObject({ code: 'invalid', retryable: false, unknown_type: 'cluster.weather' });
    await cursorReaches(t, 1);
    expect(t.client.stats.unknownTypes).toBe(1);
    // The next frame is not a gap.
    conn.sendSeq('deployment.desired', desiredPayload('d1'), {});
    await cursorReaches(t, 1);
  });

  it('an overlong type is answered with unknown_type cut to the 256 characters the error holds, an answer the hub can read; a numeric id is a poison frame, acked', async () => {
    const { t, conn } = await open();
    const id = newId();
    conn.sendRaw(JSON.stringify({ v: 1, type: '😀'.repeat(300), id, seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {} }));
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.payload).toMatchObject({ code: 'invalid', unknown_type: '😀'.repeat(256) });
    expect(readFrame(JSON.stringify(err)).kind).toBe('message');
    conn.sendRaw(JSON.stringify({ v: 1, type: 'deployment.desired', id: 5, seq: 2, ack: null, reply_to: null, ts: new Date().toISOString(), payload: desiredPayload('d1') }));
    const poison = await conn.nextOf('error');
    expect(poison.reply_to).toBeNull();
    expect(poison.payload).toMatchObject({ code: 'invalid', message: 'envelope id is not a ULID' });
    await cursorReaches(t, 2);
    expect(t.calls.desired).toHaveLength(0);
    expect(t.client.stats).toMatchObject({ unknownTypes: 1 });
  });

  it('a poison frame (payload breaks an invariant) is acked, dropped and logged at error level', async () => {
    const { t, conn } = await open();
    const { id } = conn.sendSeq('deployment.desired', desiredPayload('d1', 1, { min_replicas: 5, max_replicas: 2 }));
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.payload).toMatchObject({ code: 'invalid', retryable: false });
    await cursorReaches(t, 1);
    expect(t.calls.desired).toHaveLength(0);
    expect(t.logger.records.some((r) => r.level === 'error' && /poison/.test(r.msg))).toBe(true);
  });

  it('an error frame from the hub is never fatal', async () => {
    const { t, conn } = await open();
    const seen: unknown[] = [];
    t.client.on('hubError', (e) => seen.push(e.payload));
    conn.sendSeq('error', { code: 'conflict', message: 'nope', retryable: false });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(t, 2);
    expect(seen).toEqual([{ code: 'conflict', message: 'nope', retryable: false }]);
    expect(t.client.state).toBe('open');
  });

  it('skips a desired revision older than one already applied (a retry overtaken by a newer frame)', async () => {
    let first = true;
    const { t, conn } = await open({
      desiredResult: (p) => (p.revision === 1 && first ? ((first = false), transient('busy')) : { ok: true }),
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1', 1));
    conn.sendSeq('deployment.desired', desiredPayload('d1', 2));
    await eventually(() => t.calls.desired.length === 2, 'both revisions');
    t.timers.advance(500);
    await cursorReaches(t, 2);
    expect(t.calls.desired.map((c) => c.payload.revision)).toEqual([1, 2]);
    expect(t.client.stats.supersededDesired).toBe(1);
  });

  it('a process continuing the session does not apply an older revision over a newer one its predecessor applied behind a hole (kept in the durable record, saved at once)', async () => {
    const store = new MemoryCursorStore();
    // The cluster's own state: which revision of D is rendered now.
    let rendered = 0;
    let failedOnce = false;
    const desiredResult = (p: { revision: number }) => {
      if (p.revision === 5 && !failedOnce) {
        failedOnce = true;
        return transient('api server busy');
      }
      rendered = p.revision;
      return applied();
    };
    const { t: t1, conn } = await open({ cursorStore: store, desiredResult });

    const f1 = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const f2 = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => t1.calls.desired.length === 2, 'both frames handled');
    expect(rendered).toBe(6);
    expect(t1.client.session.cursor).toBe(0); // the hole at seq 1 holds the cursor
    // Saved at once, though the cursor did not move: a crash now must not forget it either.
    await eventually(() => store.peek()?.appliedPastCursor?.some((e) => e.deploymentId === 'D' && e.revision === 6) || undefined, 'revision 6 in the saved record');

    // A graceful stop, everything of ours acknowledged.
    const stopping = t1.client.stop({ graceful: true, timeoutMs: 1_000 });
    for (let i = 0; i < 20 && t1.client.state !== 'stopped'; i++) {
      ackAll(conn);
      await new Promise((r) => setTimeout(r, 20));
      t1.timers.advance(100);
    }
    await stopping;
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, cursor: 0 });

    // The next process resumes S1; the hub replays from its cursor (0): both frames again.
    const t2 = makeClient(hub, { cursorStore: store, desiredResult });
    clients.push(t2);
    await t2.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: (t1.client.session.outbound?.nextSeq ?? 1) - 1 });
    conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: f1.id! });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: f2.id! });
    await eventually(() => t2.client.session.cursor >= 2 || undefined, 'both replayed frames settled');

    // The cluster had revision 6; it must never be rendered back to revision 5.
    const appliedRevs = t2.calls.desired.map((c) => c.payload.revision);
    expect(appliedRevs).not.toContain(5);
    expect(rendered).toBe(6);
  });
});

describe("the hub's resync stream", () => {
  it('prunes local desired deployments only after a complete stream.end with a matching count', async () => {
    const { t, conn } = await open();
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: begin.id });
    conn.sendSeq('deployment.desired', desiredPayload('d2'), { reply_to: begin.id });
    expect(t.calls.prunes).toHaveLength(0);
    conn.sendSeq('stream.end', { complete: true, count: 2 }, { reply_to: begin.id });
    await cursorReaches(t, 4);
    expect(t.calls.prunes.map((k) => [...k].sort())).toEqual([['d1', 'd2']]);
    expect(t.calls.desired.every((c) => c.ctx.resyncId === begin.id)).toBe(true);
  });

  it('does not prune when the count differs, when incomplete, or when a frame in it was unreadable', async () => {
    const { t, conn } = await open();
    const a = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: a.id });
    conn.sendSeq('stream.end', { complete: true, count: 2 }, { reply_to: a.id });
    const b = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('stream.end', { complete: false, count: 0 }, { reply_to: b.id });
    const c = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1', 1, { min_replicas: 9, max_replicas: 1 }), { reply_to: c.id });
    conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: c.id });
    await cursorReaches(t, 8);
    expect(t.calls.prunes).toHaveLength(0);
  });

  it('prunes past a frame of an unknown type of another kind in the snapshot (a newer plane), but not past one that could be a deployment', async () => {
    const { t, conn } = await open();
    const raw = (type: string, seq: number, replyTo: string) =>
      conn.sendRaw(JSON.stringify({ v: 1, type, id: newId(), seq, ack: null, reply_to: replyTo, ts: new Date().toISOString(), payload: { x: 1 } }));
    // seq 1 begin, 2 d1, 3 an unknown kind, 4 end: counted, answered, and the prune keeps d1.
    const a = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: a.id });
    raw('gadget.desired', 3, a.id);
    conn.seqFrom(4);
    conn.sendSeq('stream.end', { complete: true, count: 2 }, { reply_to: a.id });
    await cursorReaches(t, 4);
    expect(t.calls.prunes.map((k) => [...k].sort())).toEqual([['d1']]);
    // seq 5 begin, 6 d1, 7 an unknown deployment type, 8 end: what the snapshot holds is unknown.
    const b = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: b.id });
    raw('deployment.desired_v2', 7, b.id);
    conn.seqFrom(8);
    conn.sendSeq('stream.end', { complete: true, count: 2 }, { reply_to: b.id });
    await cursorReaches(t, 8);
    expect(t.calls.prunes).toHaveLength(1);
    expect(t.client.stats.unknownTypes).toBe(2);
  });

  it('a snapshot whose scope names a kind this SDK does not know (a newer plane) still prunes deployments, and says so', async () => {
    const { t, conn } = await open();
    const a = conn.sendSeq('resync.begin', { scope: ['deployment', 'gadget'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: a.id });
    conn.sendRaw(JSON.stringify({ v: 1, type: 'gadget.desired', id: newId(), seq: 3, ack: null, reply_to: a.id, ts: new Date().toISOString(), payload: { x: 1 } }));
    conn.seqFrom(4);
    conn.sendSeq('stream.end', { complete: true, count: 2 }, { reply_to: a.id });
    await cursorReaches(t, 4);
    expect(t.calls.prunes.map((k) => [...k].sort())).toEqual([['d1']]);
    expect(t.client.stats.poisonFrames).toBe(0);
    expect(t.logger.records.some((r) => r.level === 'warn' && /does not know/.test(r.msg) && JSON.stringify(r.unknown) === '["gadget"]')).toBe(true);
    // A scope of only unknown kinds opens a stream that prunes nothing here.
    const b = conn.sendSeq('resync.begin', { scope: ['gadget'] });
    conn.sendSeq('stream.end', { complete: true, count: 0 }, { reply_to: b.id });
    await cursorReaches(t, 6);
    expect(t.calls.prunes).toHaveLength(1);
    expect(t.client.stats.poisonFrames).toBe(0);
  });
});

describe('handler errors', () => {
  it('a handler that throws PermanentError rejects the frame: acked, dropped, answered with error {invalid, retryable false, reply_to}', async () => {
    const { t, conn } = await open({
      desiredResult: () => {
        throw new PermanentError('serving image is not allowed on this cluster');
      },
    });
    const { id } = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.seq).not.toBeNull();
    expect(err.payload).toEqual({ code: 'invalid', message: 'serving image is not allowed on this cluster', retryable: false });
    await cursorReaches(t, 1);
    t.timers.advance(50);
    await eventually(() => conn.highestAck === 1, 'ack 1');
    expect(t.client.stats).toMatchObject({ permanentFailures: 1, handlerFailures: 0 });
    expect(t.calls.desired).toHaveLength(1);
  });

  it('any other throw is transient: later frames are still applied, the cursor stays behind the hole until a retry succeeds, and the failures reach the hub in link.stats', async () => {
    let throwsLeft = 2;
    const { t, conn } = await open({
      statsIntervalMs: 1,
      desiredResult: (p) => {
        if (p.deployment_id === 'd1' && throwsLeft-- > 0) throw new Error('api server down');
        return applied();
      },
    });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    conn.sendSeq('deployment.desired', desiredPayload('d2'));
    conn.sendSeq('deployment.desired', desiredPayload('d3'));
    await eventually(() => t.calls.desired.length === 3, 'every frame handed to the handler');
    t.timers.advance(50);
    await sync(conn);
    expect(t.client.session.cursor).toBe(0);
    expect(conn.highestAck).toBe(0);
    expect(t.client.stats.handlerFailures).toBe(1);
    const stats1 = await conn.seen((f) => f.type === 'link.stats' && f.payload.handler_failures === 1, 'link.stats with one failure');
    expect(stats1.payload).toMatchObject({ dropped_events: 0, handler_failures: 1 });

    t.timers.advance(500); // first retry: throws again
    await eventually(() => t.calls.desired.length === 4, 'the first retry');
    expect(t.client.session.cursor).toBe(0);
    t.timers.advance(1_000); // second retry: applies
    await cursorReaches(t, 3);
    t.timers.advance(50);
    await eventually(() => conn.highestAck === 3, 'ack 3');
    expect(t.calls.desired.map((c) => [c.payload.deployment_id, c.ctx.attempt])).toEqual([
      ['d1', 0], ['d2', 0], ['d3', 0], ['d1', 1], ['d1', 2],
    ]);
    await conn.seen((f) => f.type === 'link.stats' && f.payload.handler_failures === 2, 'link.stats with two failures');
  });

  it('an event listener that throws does not leave the frame it was told about unsettled', async () => {
    const { t, conn } = await open();
    t.client.on('hubError', () => {
      throw new Error('application bug');
    });
    conn.sendSeq('error', { code: 'conflict', message: 'nope', retryable: false });
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await cursorReaches(t, 2);
  });

  // setState emitted 'state' bare: a listener that threw on 'open' cut the welcome short (no
  // observed resync, no pings, no 'welcome' event) and escaped from the socket's message handler,
  // an uncaught exception that takes the process down.
  it("a 'state' or 'stopped' listener that throws does not cut the welcome short or fail the stop", async () => {
    const t = makeClient(hub);
    clients.push(t);
    t.client.on('state', (s) => {
      if (s === 'open' || s === 'stopping') throw new Error('application bug');
    });
    t.client.on('stopped', () => {
      throw new Error('application bug');
    });
    const welcomed: string[] = [];
    t.client.on('welcome', (w) => welcomed.push(w.sessionId));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    const { end } = await readResync(conn);
    expect(end.payload).toEqual({ complete: true, count: 3 });
    expect(welcomed).toEqual(['S1']);
    await t.client.stop({ graceful: false });
    expect(t.client.state).toBe('stopped');
    expect(t.logger.records.filter((r) => r.msg.includes('listener threw')).length).toBe(3);
  });
});

describe('prune against the hub snapshot', () => {
  it('pruneDesired is required: by the handler types, and by the constructor for callers without them', () => {
    // @ts-expect-error pruneDesired is required
    const handlers: OperatorHandlers = { desired: () => applied(), operation: () => ({ outcome: 'succeeded' }) };
    const build = () =>
      new OperatorClient({ url: hub.url, token: 'wsmet_x', clusterId: 'c1', operatorVersion: '0.1.0', cursorStore: new MemoryCursorStore(), snapshot: () => SNAPSHOT, handlers });
    expect(build).toThrow(TypeError);
    expect(build).toThrow(/pruneDesired/);
  });

  /** `unreadable`: the stream.end came, but its payload does not decode (a poison frame). */
  async function stopMidSnapshot(ended: boolean | 'unreadable') {
    const store = new MemoryCursorStore();
    const { t, conn } = await open({ cursorStore: store });
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: begin.id });
    if (ended === true) conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    if (ended === 'unreadable') conn.sendSeq('stream.end', { complete: 'yes', count: 1 } as unknown as Payload<'stream.end'>, { reply_to: begin.id });
    await cursorReaches(t, ended ? 3 : 2);
    if (ended === 'unreadable') await conn.seen((f) => f.type === 'error' && f.reply_to !== null, 'the answer to the unreadable frame');
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'everything acknowledged');
    await t.client.stop();
    return { store, t };
  }

  it('a process stopped in the middle of a hub snapshot says lossy on its next hello, and the fresh session brings a snapshot it prunes against', async () => {
    const { store } = await stopMidSnapshot(false);
    // Even a graceful stop: the half-received snapshot is gone from memory with the process.
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, hubSnapshotOpen: true });

    const t2 = makeClient(hub, { cursorStore: store });
    clients.push(t2);
    await t2.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    const begin = conn2.sendSeq('resync.begin', { scope: ['deployment'] });
    conn2.sendSeq('deployment.desired', desiredPayload('d2'), { reply_to: begin.id });
    conn2.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    await cursorReaches(t2, 3);
    expect(t2.calls.prunes.map((k) => [...k])).toEqual([['d2']]);
    t2.timers.advance(50);
    await eventually(() => store.peek()?.hubSnapshotOpen === false, 'the flag cleared once the stream ended');
  });

  it('a process stopped during a hub stream of kinds it does not know (a newer hub) resumes: that stream prunes nothing here, so nothing was lost with it', async () => {
    const store = new MemoryCursorStore();
    const { t, conn } = await open({ cursorStore: store });
    const begin = conn.sendSeq('resync.begin', { scope: ['gadget'] });
    const gadget = newId();
    conn.sendRaw(JSON.stringify({ v: 1, type: 'gadget.desired', id: gadget, seq: 2, ack: null, reply_to: begin.id, ts: new Date().toISOString(), payload: { x: 1 } }));
    await cursorReaches(t, 2);
    // The unknown type's answer is sequenced: acknowledged below with the rest.
    await conn.seen((f) => f.type === 'error' && f.reply_to === gadget, 'the answer to the unknown type');
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'everything acknowledged');
    await t.client.stop();
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, hubSnapshotOpen: false });
  });

  it('an unreadable stream.end still ends its snapshot, unpruned: the record does not say a snapshot was under way, so the next start resumes', async () => {
    const { store, t } = await stopMidSnapshot('unreadable');
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, hubSnapshotOpen: false });
    expect(t.calls.prunes).toEqual([]);
  });

  it('a process stopped after the snapshot ended resumes without a resync', async () => {
    const { store } = await stopMidSnapshot(true);
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, hubSnapshotOpen: false });
    const t2 = makeClient(hub, { cursorStore: store });
    clients.push(t2);
    await t2.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 3, lossy: false });
  });
});
