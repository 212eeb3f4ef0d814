/**
 * The hub's resync stream and the control-frame bound (found by a conformance audit,
 * 2026-12-03). A frame is withheld while the send queue has no room for an answer it might
 * need; a member withheld so must still count in its stream, or a complete, correctly counted
 * snapshot is never pruned against; and a resync.begin, which needs no answer, is never
 * withheld, or members and end would pass it and the stream it opens late would never close.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { permanent } from '../../../src/operator/handlers';
import { cursorReaches, desiredPayload, makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

const LIMIT = 3;
/** link.stats + resync.begin, cluster, node, device, stream.end: what the session opens with. */
const OPENING_FRAMES = 6;
const RETRY_MS = 100;

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const maxSeq = (conn: HubConnection) => conn.frames.reduce((m, f) => (f.seq !== null && f.seq > m ? f.seq : m), 0);

describe('hub snapshot under the control-frame bound', () => {
  it('prunes against a complete snapshot whose member was withheld for want of room in the send queue', async () => {
    const t = makeClient(hub, {
      controlQueueLimit: LIMIT,
      retry: { baseMs: RETRY_MS, capMs: RETRY_MS },
      idleTimeoutMs: 3_600_000,
      pingIntervalMs: 3_600_000,
      // d1 and d2 cannot be rendered on this cluster: each is refused with an error frame.
      desiredResult: (p) => (p.deployment_id === 'd3' ? { ok: true } : permanent('no such GPU model here')),
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // The hub's replay window is exactly what the session opens with: later frames wait for acks.
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: OPENING_FRAMES } });
    await readResync(conn);
    await eventually(() => t.client.stats.unacked === OPENING_FRAMES, 'the replay window to fill');

    // The hub's snapshot: begin, three deployments, end {complete: true, count: 3}.
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: begin.id });
    conn.sendSeq('deployment.desired', desiredPayload('d2'), { reply_to: begin.id });
    // Two refusals wait in the send queue: fewer than 2 control slots are free, d3 is withheld.
    const d3 = conn.sendSeq('deployment.desired', desiredPayload('d3'), { reply_to: begin.id });
    await eventually(() => t.client.stats.transientFailures >= 1, 'd3 withheld');
    expect(t.calls.desired.map((c) => c.payload.deployment_id)).toEqual(['d1', 'd2']);

    // The hub acknowledges what it has; the queue drains and room frees.
    conn.send('ack', {}, { ack: maxSeq(conn) });
    await eventually(() => t.client.stats.queued === 0, 'the send queue to drain');

    const end = conn.sendSeq('stream.end', { complete: true, count: 3 }, { reply_to: begin.id });
    // A round trip: once the pong is here the end has been read (and, a moment later, applied).
    const pongs = conn.frames.filter((f) => f.type === 'pong').length;
    conn.send('ping', {});
    await eventually(() => conn.frames.filter((f) => f.type === 'pong').length > pongs, 'pong');
    await new Promise((r) => setTimeout(r, 20));
    expect(end.seq).toBe(d3.seq + 1);
    // d3's retry.
    t.timers.advance(RETRY_MS);
    await cursorReaches(t, d3.seq + 1);
    expect(t.calls.desired.map((c) => c.payload.deployment_id)).toEqual(['d1', 'd2', 'd3']);

    // The snapshot was complete and its count right: the operator prunes against it.
    expect(t.calls.prunes.map((k) => [...k].sort())).toEqual([['d1', 'd2', 'd3']]);
  });

  it('a resync.begin that arrives while the send queue has no room is applied at once: its stream ends, is pruned against, and nothing stays open', async () => {
    const store = new MemoryCursorStore();
    const t = makeClient(hub, {
      cursorStore: store,
      controlQueueLimit: LIMIT,
      retry: { baseMs: RETRY_MS, capMs: RETRY_MS },
      idleTimeoutMs: 3_600_000,
      pingIntervalMs: 3_600_000,
      desiredResult: (p) => (p.deployment_id === 'd3' ? { ok: true } : permanent('no such GPU model here')),
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: OPENING_FRAMES } });
    await readResync(conn);
    await eventually(() => t.client.stats.unacked === OPENING_FRAMES, 'the replay window to fill');

    // Two ordinary frames refused: their error replies wait in the send queue.
    conn.sendSeq('deployment.desired', desiredPayload('d1'));
    conn.sendSeq('deployment.desired', desiredPayload('d2'));
    await eventually(() => t.client.stats.queued >= 2, 'the two refusals queued');
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    await cursorReaches(t, begin.seq);
    expect(t.client.stats.transientFailures).toBe(0);

    conn.send('ack', {}, { ack: maxSeq(conn) });
    await eventually(() => t.client.stats.queued === 0, 'the send queue to drain');
    conn.sendSeq('deployment.desired', desiredPayload('d3'), { reply_to: begin.id });
    const end = conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    const pongs = conn.frames.filter((f) => f.type === 'pong').length;
    conn.send('ping', {});
    await eventually(() => conn.frames.filter((f) => f.type === 'pong').length > pongs, 'pong');
    await new Promise((r) => setTimeout(r, 20));
    await cursorReaches(t, end.seq);
    t.timers.advance(50);
    await eventually(() => conn.highestAck >= end.seq, `ack ${end.seq}`);

    // The stream began and ended: nothing is open, so a restart need not say lossy.
    expect(store.peek()?.hubSnapshotOpen).toBe(false);
    expect(t.calls.prunes.map((k) => [...k].sort())).toEqual([['d3']]);
  });
});
