/**
 * The SDK against a scripted hub: bad hub frames (a fatal envelope answered with an error frame
 * before 4400, a binary frame, a frame past the dialer's maxPayload taken as 1009 and so a lossy
 * next hello), operation deadlines that pass before or during a handler, and public-API inputs
 * (ids, storable text, a report too big for any frame).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { wsDialer } from '../../../src/operator/ws-transport';
import { newId } from '../../../src/protocol';
import { cursorReaches, makeClient, reconnectAfterBackoff, type TestClient, openWelcomed } from './support/harness';
import { heldOperations, operationStart } from './support/operations';
import { eventually, ScriptedHub } from './support/scripted-hub';

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

describe('bad hub frames', () => {
  it('a fatal envelope (v out of range) closes 4400 after an error frame (MESSAGES.md, Envelope)', async () => {
    const { conn } = await open();
    const id = newId();
    conn.sendRaw(JSON.stringify({ v: 2, type: 'deployment.desired', id, seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {} }));
    const closed = await conn.waitClosed();
    expect(closed.code).toBe(4400);
    const after = conn.frames.filter((f) => f.type === 'error');
    expect(after.length).toBeGreaterThan(0);
    expect(after[0]?.reply_to).toBe(id);
  });

  it('a seq gap from the hub closes 4400 after a connection-level error frame naming the gap, reply_to the frame (MESSAGES.md, Envelope)', async () => {
    const { conn } = await open();
    const id = newId();
    conn.sendRaw(JSON.stringify({ v: 1, type: 'error', id, seq: 1_000, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { code: 'internal', message: 'x', retryable: false } }));
    const closed = await conn.waitClosed();
    const errors = conn.frames.filter((f) => f.type === 'error');
    expect({ code: closed.code, seq: errors[0]?.seq ?? null, reply_to: errors[0]?.reply_to, gap: String(errors[0]?.payload.message).includes('gap') }).toEqual({
      code: 4400,
      seq: null,
      reply_to: id,
      gap: true,
    });
  });

  it('a binary frame closes the link 4400 and the SDK reconnects', async () => {
    const { t, conn } = await open();
    conn.socket.send(Buffer.from('{"v":1}'), { binary: true });
    const closed = await conn.waitClosed();
    expect(closed.code).toBe(4400);
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: false });
  });

  it('a hub frame over the dialer maxPayload closes 1009, and the next hello is lossy (README)', async () => {
    const { t, conn } = await open({ dial: wsDialer({ maxPayloadBytes: 8192 }) });
    conn.sendRaw(JSON.stringify({ v: 1, type: 'error', id: newId(), seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { code: 'internal', message: 'x'.repeat(20000), retryable: false } }));
    const closed = await conn.waitClosed();
    expect(closed.code).toBe(1009);
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    const codes = t.logger.records.filter((r) => r.msg === 'link closed').map((r) => (r as { code?: number }).code);
    expect({ lossy: (hello.payload as { lossy: boolean }).lossy, codesSeenBySdk: codes }).toEqual({ lossy: true, codesSeenBySdk: [1009] });
  });
});

describe('operation deadlines', () => {
  it('an operation.start whose deadline already passed is answered error {deadline} and acked', async () => {
    const { t, conn } = await open();
    const p = operationStart(t.timers.now() - 1_200_000);
    const { id } = conn.sendSeq('operation.start', p);
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.payload).toMatchObject({ code: 'deadline', retryable: false });
    await cursorReaches(t, 1);
    expect(t.calls.operations).toHaveLength(0);
  });

  it('a passed-deadline start replayed on a resume after a dropped TCP connection is answered error {deadline}', async () => {
    const { t, conn } = await open();
    const sent = Math.max(...conn.frames.map((f) => f.seq ?? 0));
    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1' });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: sent });
    const p = operationStart(t.timers.now(), { deadline: new Date(t.timers.now() - 60_000).toISOString() });
    conn2.seqFrom(1);
    const { id } = conn2.sendSeq('operation.start', p);
    await new Promise((r) => setTimeout(r, 300));
    const err = conn2.frames.find((f) => f.type === 'error');
    expect(err?.reply_to).toBe(id);
    expect(err?.payload).toMatchObject({ code: 'deadline' });
  });

  it('a handler still running at the deadline: error {deadline} at the deadline, ctx.signal aborted', async () => {
    let signal: AbortSignal | null = null;
    const held = heldOperations();
    const { t, conn } = await open({
      handlers: {
        operation: (p, ctx) => {
          signal = ctx.signal;
          return held.operation(p, ctx);
        },
      },
    });
    const p = operationStart(t.timers.now(), { deadline: new Date(t.timers.now() + 5_000).toISOString() });
    const { id } = conn.sendSeq('operation.start', p);
    await conn.nextOf('operation.accepted');
    await eventually(() => signal !== null, 'handler running');
    t.timers.advance(4_999);
    await new Promise((r) => setTimeout(r, 30));
    expect(conn.frames.some((f) => f.type === 'error' && f.reply_to === id)).toBe(false);
    t.timers.advance(1);
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(id);
    expect(err.payload).toMatchObject({ code: 'deadline' });
    expect((signal as AbortSignal | null)?.aborted).toBe(true);
    held.running[0]?.('succeeded');
    await new Promise((r) => setTimeout(r, 30));
    expect(conn.frames.filter((f) => f.type === 'operation.result')).toHaveLength(0);
  });
});

describe('public API inputs', () => {
  it('a bad node id is a TypeError', async () => {
    const { t } = await open();
    expect(() => t.client.removeNode('bad id with spaces')).toThrow(TypeError);
    expect(() => t.client.removeNode('')).toThrow(TypeError);
    expect(() => t.client.removeNode('a'.repeat(254))).toThrow(TypeError);
  });

  it('event text with a NUL or a lone surrogate is accepted and sent (MESSAGES.md: never a reason to drop)', async () => {
    const { t, conn } = await open();
    const outcome = t.client.emitEvent('node', { subject: 'node-a', reason: 'Cordoned', message: 'a\u0000b\ud800c', severity: 'info' });
    expect(outcome).not.toBe('rejected');
    const ev = await conn.nextOf('node.event');
    expect(typeof ev.payload.message).toBe('string');
    expect(ev.raw).not.toMatch(/[\ud800-\udfff](?![\udc00-\udfff])/u);
  });

  it('a deployment.observed valid field by field but over max_frame_bytes is refused at the call with a RangeError, not dropped at write time; one that fits is sent', async () => {
    const { t, conn } = await open();
    const report = (n: number) => ({
      deployment_id: 'd1',
      observed_revision: 1,
      phase: 'ready',
      replica_ids: Array.from({ length: n }, (_, i) => `r${String(i).padStart(6, '0')}${'x'.repeat(246)}`),
      ready_replicas: 0,
      message: '',
    });
    // 4,096 ids of 253 characters: every field in bounds, the frame about 1,048,800 bytes.
    expect(() => t.client.reportDeployment(report(4096) as never)).toThrow(RangeError);
    expect(() => t.client.reportDeployment(report(4096) as never)).toThrow(/max_frame_bytes/);
    expect(t.client.reportDeployment(report(4000) as never)).toBe('appended');
    await eventually(() => conn.frames.some((f) => f.type === 'deployment.observed'), 'the report that fits sent');
    expect((t.client.stats as unknown as Record<string, number>).oversizeFrames).toBe(0);
  });
});
