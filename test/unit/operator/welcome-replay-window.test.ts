/**
 * welcome.limits.replay_buffer_frames/_bytes bound what the SDK holds written and unacknowledged
 * (README, Bounds: "Everything the SDK holds in memory to send is bounded"). The schema only asks
 * them to be positive integers, and the SDK used them as they came: a hub advertising 1e15 of each
 * lifted the bound altogether, so every report was numbered at once and kept (in memory, and in
 * the FileOutboundLog on disk) until the hub acknowledged it, instead of waiting in the coalescing
 * queue, where a newer report of a subject replaces the older one. A hub that acknowledges slowly
 * (enough to keep the ack watch quiet) grew the buffer for as long as the cluster reported.
 * Proves that a replay window past the SDK's own bounds (handshake.ts `boundedLimits`) is replaced
 * by the SDK's default and said once, that the frames held back go out as the hub acknowledges,
 * and that the hub's own defaults are kept.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../../src/operator/client-types';
import { boundedLimits, MAX_REPLAY_BUFFER_BYTES, MAX_REPLAY_BUFFER_FRAMES } from '../../../src/operator/handshake';
import { ackAll, makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
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

const HUGE = 1e15; // a safe integer, so the catalog admits it
const LIMITS = { ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: 1 << 20, replay_buffer_frames: 50_000, replay_buffer_bytes: 64 << 20 };
const windowOf = (frames: number, bytes: number) => {
  const { limits } = boundedLimits({ ...LIMITS, replay_buffer_frames: frames, replay_buffer_bytes: bytes });
  return [limits.replay_buffer_frames, limits.replay_buffer_bytes];
};

describe('a welcome advertising an absurd replay window', () => {
  it('does not lift the bound on frames held unacknowledged: past the default window, reports wait for acks', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true, limits: { replay_buffer_frames: HUGE, replay_buffer_bytes: HUGE } });
    await readResync(conn);
    expect(t.client.session.limits).toMatchObject({ replay_buffer_frames: DEFAULT_LIMITS.replay_buffer_frames, replay_buffer_bytes: DEFAULT_LIMITS.replay_buffer_bytes });

    // More distinct nodes than the default window, reported in batches the send queue holds.
    const window = DEFAULT_LIMITS.replay_buffer_frames;
    const nodes = window + 2_000;
    for (let i = 0; i < nodes; i += 1_000) {
      for (let j = i; j < i + 1_000; j++) t.client.reportNode({ ...SNAPSHOT.nodes[0]!, node_id: `node-${j}`, name: `node-${j}` });
      await new Promise((r) => setTimeout(r, 5));
    }
    const outbound = () => t.client.session.outbound ?? { nextSeq: 1, peerAck: 0 };
    await eventually(() => outbound().nextSeq > window, 'the window filled');
    await new Promise((r) => setTimeout(r, 50));
    const { nextSeq, peerAck } = outbound();
    expect(nextSeq - 1 - peerAck).toBe(window);

    // Nothing was lost: what waited goes out once the hub acknowledges.
    ackAll(conn);
    await conn.seen((f) => f.type === 'node.observed' && (f.payload as { node_id?: string }).node_id === `node-${nodes - 1}`, 'the last node reported');
    const reported = new Set(conn.frames.filter((f) => f.type === 'node.observed').map((f) => (f.payload as { node_id: string }).node_id));
    expect(reported.size).toBe(nodes + 1); // and node-a of the snapshot
  });

  it('is said once, naming what was asked and what is used', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true, limits: { replay_buffer_frames: HUGE, replay_buffer_bytes: HUGE } });
    await readResync(conn);
    const warnings = t.logger.records.filter((r) => r.level === 'warn' && typeof r.field === 'string' && r.field.startsWith('replay_buffer'));
    expect(warnings.map((w) => [w.field, w.got, w.used])).toEqual([
      ['replay_buffer_frames', HUGE, DEFAULT_LIMITS.replay_buffer_frames],
      ['replay_buffer_bytes', HUGE, DEFAULT_LIMITS.replay_buffer_bytes],
    ]);
  });

  it('bounds: up to MAX_REPLAY_BUFFER_FRAMES and _BYTES the hub\'s window is kept (its defaults, 50,000 and 64 MiB, and 1 frame of 1 byte too)', () => {
    expect(windowOf(50_000, 64 << 20)).toEqual([50_000, 64 << 20]);
    expect(windowOf(1, 1)).toEqual([1, 1]);
    expect(windowOf(MAX_REPLAY_BUFFER_FRAMES, MAX_REPLAY_BUFFER_BYTES)).toEqual([MAX_REPLAY_BUFFER_FRAMES, MAX_REPLAY_BUFFER_BYTES]);
    expect(windowOf(MAX_REPLAY_BUFFER_FRAMES + 1, 64 << 20)).toEqual([DEFAULT_LIMITS.replay_buffer_frames, 64 << 20]);
    expect(windowOf(50_000, MAX_REPLAY_BUFFER_BYTES + 1)).toEqual([50_000, DEFAULT_LIMITS.replay_buffer_bytes]);
    expect(windowOf(HUGE, HUGE)).toEqual([DEFAULT_LIMITS.replay_buffer_frames, DEFAULT_LIMITS.replay_buffer_bytes]);
  });
});
