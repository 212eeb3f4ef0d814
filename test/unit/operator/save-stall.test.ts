/**
 * A write to local storage that never completes (a hung volume: NFS, a detached block device)
 * holds the link: a save of the durable state holds every save behind it, and with them every
 * ack and operation start; a sync of the outbound log holds the write batch, so nothing is sent.
 * The hub's window fills, it stops sending, and the cluster is no longer managed. Before, nothing
 * said so: no line, no event, nothing failed. Now the held call is reported as a held handler is
 * (an error line with cluster and session, and the `saveStalled` event) at `handlerStallMs` and
 * again as the wait doubles, and a line says when it ends; what it held then goes out.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore, type HeldStorage } from '../../../src/operator';
import { desiredPayload, makeClient, openWelcomed, SlowOutboundLog, SNAPSHOT, type TestClient } from './support/harness';
import { GatedStore, openSession } from './support/operations';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
let t: TestClient | null = null;
let hanging: GatedStore | SlowOutboundLog | null = null;

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  hanging?.release();
  hanging = null;
  await t?.client.stop({ graceful: false });
  t = null;
  await hub.stop();
});

describe('a save of the durable state that does not complete', () => {
  it('is reported at handlerStallMs and as the wait doubles, holds the ack, and the ack goes out once it completes', async () => {
    const store = (hanging = new GatedStore());
    t = makeClient(hub, { cursorStore: store, handlerStallMs: 1_000, ackDelayMs: 0 });
    const stalls: { what: HeldStorage; heldMs: number }[] = [];
    t.client.on('saveStalled', (s) => stalls.push(s));
    const conn = await openSession(hub, t, 'S-save');
    store.hold();
    const frame = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t!.client.session.cursor === frame.seq, 'the frame to be applied');
    // Its ack is due after ackDelayMs (0 here), and the save before it.
    t.timers.advance(0);
    await eventually(() => store.held === 1, 'the save of the applied frame to start and hang');

    t.timers.advance(999);
    expect(stalls).toEqual([]);
    t.timers.advance(1);
    expect(stalls).toEqual([{ what: 'record', heldMs: 1_000 }]);
    const line = t.logger.records.find((r) => r.msg.startsWith('a save of the durable state has not completed'));
    expect(line).toMatchObject({ level: 'error', cluster: 'c1', session: 'S-save', held_ms: 1_000, cursor: frame.seq });

    // Again at 2 s and 4 s held, not in between.
    t.timers.advance(999);
    expect(stalls.length).toBe(1);
    t.timers.advance(1);
    t.timers.advance(2_000);
    expect(stalls.map((s) => s.heldMs)).toEqual([1_000, 2_000, 4_000]);
    expect(conn.highestAck, 'no ack of a frame whose save has not completed').toBe(0);

    store.release();
    await eventually(() => store.saves > 0 && t!.logger.records.some((r) => r.msg.startsWith('the held save of the durable state ended')), 'the save to end');
    expect(t.logger.records.find((r) => r.msg.startsWith('the held save of the durable state ended'))).toMatchObject({ level: 'warn', cursor: frame.seq });
    t.timers.advance(10_000);
    await eventually(() => conn.highestAck === frame.seq, 'the ack once the save completed');
    t.timers.advance(60_000);
    expect(stalls.length, 'no report after it completed').toBe(3);
  });

  it('a sync of the outbound log is reported the same way, and what it held is sent once it completes', async () => {
    const log = (hanging = new SlowOutboundLog());
    const clients: TestClient[] = [];
    const { t: client, conn } = await openWelcomed(hub, clients, { outboundLog: log, handlerStallMs: 1_000 });
    t = client;
    const stalls: { what: HeldStorage; heldMs: number }[] = [];
    client.client.on('saveStalled', (s) => stalls.push(s));
    log.hold();
    client.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    await eventually(() => log.held === 1, 'the batch\'s sync to start and hang');
    client.timers.advance(1_000);
    expect(stalls).toEqual([{ what: 'outbound-log', heldMs: 1_000 }]);
    expect(client.logger.records.find((r) => r.msg.startsWith('a sync of the outbound log has not completed'))).toMatchObject({ level: 'error', cluster: 'c1', session: 'S1', held_ms: 1_000 });
    expect(conn.frames.filter((f) => f.type === 'node.observed' && f.payload.ready === false), 'nothing sent while the sync is held').toEqual([]);
    log.release();
    await conn.seen((f) => f.type === 'node.observed' && f.payload.ready === false, 'the held report');
    expect(client.logger.records.find((r) => r.msg.startsWith('the held sync of the outbound log ended'))).toMatchObject({ level: 'warn', held_ms: 1_000 });
    client.timers.advance(60_000);
    expect(stalls.length, 'no report after it completed').toBe(1);
  });

  it('a save that completes within the limit is not reported', async () => {
    t = makeClient(hub, { handlerStallMs: 1_000, ackDelayMs: 0 });
    const stalls: unknown[] = [];
    t.client.on('saveStalled', (s) => stalls.push(s));
    const conn = await openSession(hub, t, 'S-quick');
    const frame = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t!.client.session.cursor === frame.seq, 'the frame to be applied');
    t.timers.advance(0);
    await eventually(() => t!.store instanceof MemoryCursorStore && (t!.store.peek()?.cursor ?? 0) === frame.seq, 'the save');
    t.timers.advance(60_000);
    expect(stalls).toEqual([]);
    expect(t.logger.records.filter((r) => r.msg.includes('save of the durable state'))).toEqual([]);
  });

  it("the record's load at start is reported the same way: a start held by a hung volume says so", async () => {
    const store = (hanging = new GatedStore());
    store.holdLoads = true;
    store.hold();
    t = makeClient(hub, { cursorStore: store, handlerStallMs: 1_000 });
    const stalls: { what: HeldStorage; heldMs: number }[] = [];
    t.client.on('saveStalled', (s) => stalls.push(s));
    let started = false;
    const starting = t.client.start().then(() => (started = true));
    await eventually(() => store.held === 1, 'the load to start and hang');
    t.timers.advance(1_000);
    expect(stalls).toEqual([{ what: 'record-load', heldMs: 1_000 }]);
    expect(t.logger.records.find((r) => r.msg.startsWith('loading the durable state at start has not completed'))).toMatchObject({ level: 'error', cluster: 'c1', held_ms: 1_000 });
    expect(started).toBe(false);
    store.release();
    await starting;
    expect(t.logger.records.find((r) => r.msg.startsWith('the held load of the durable state ended'))).toMatchObject({ level: 'warn', held_ms: 1_000 });
    t.timers.advance(60_000);
    expect(stalls.length, 'no report after it completed').toBe(1);
  });
});
