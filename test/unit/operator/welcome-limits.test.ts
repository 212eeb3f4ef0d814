/**
 * welcome.limits is the hub's input. The schema only asks ping_interval_s and idle_timeout_s to be
 * positive, and the SDK used them as they came: a welcome saying ping_interval_s 0.001 made the
 * operator ping a thousand times a second, one saying idle_timeout_s 0.001 made it drop every link
 * at once. The spec: "The operator sends ping every 10s. A peer that has seen no frame of any kind
 * for 30s considers the connection dead." Proves that a timing limit outside the bounds derived
 * from those sentences (handshake.ts `boundedLimits`: ping in [1 s, 10 s], idle in [2 × ping, 30 s])
 * is replaced by the spec's value and logged once, and that one inside them is followed as before.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { boundedLimits } from '../../../src/operator/handshake';
import { ackAll, makeClient, readResync, reconnectAfterBackoff, SNAPSHOT, type TestClient } from './support/harness';
import { ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

type TimingLimits = { ping_interval_s?: number; idle_timeout_s?: number };

async function open(limits: TimingLimits) {
  const t = makeClient(hub);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1', full_resync: true, limits });
  await readResync(conn);
  return { t, conn };
}

const LIMITS = { ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: 1 << 20, replay_buffer_frames: 100, replay_buffer_bytes: 1 << 20 };
const timing = (l: TimingLimits) => {
  const { limits } = boundedLimits({ ...LIMITS, ...l });
  return [limits.ping_interval_s, limits.idle_timeout_s];
};

describe('odd welcome.limits', () => {
  it('a welcome asking for a ping every millisecond does not make the operator flood pings', async () => {
    const { t, conn } = await open({ ping_interval_s: 0.001 });
    const before = conn.frames.filter((f) => f.type === 'ping').length;
    t.timers.advance(1_000);
    await new Promise((r) => setTimeout(r, 50));
    const pings = conn.frames.filter((f) => f.type === 'ping').length - before;
    expect(pings).toBeLessThanOrEqual(1);
    expect(t.client.session.limits.ping_interval_s).toBe(10);
  });

  it('a welcome with a one-millisecond idle limit does not make the operator drop a link the hub speaks on every 5 s', async () => {
    const { t, conn } = await open({ idle_timeout_s: 0.001 });
    // The hub speaks every 5 s and acknowledges everything: well inside the spec's 30 s.
    for (let i = 0; i < 8; i++) {
      ackAll(conn);
      conn.ping(0);
      await new Promise((r) => setTimeout(r, 10));
      t.timers.advance(5_000);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(conn.closed).toBeNull();
    expect(t.client.state).toBe('open');
  });

  it('an idle limit past the spec\'s 30 s is not kept either: a silent link is closed after 30 s', async () => {
    const { t, conn } = await open({ idle_timeout_s: 3_600 });
    ackAll(conn);
    t.timers.advance(30_000);
    expect((await conn.waitClosed()).code).toBe(4408);
  });

  it('out-of-bounds values are replaced by the spec\'s, logged once however many welcomes repeat them', async () => {
    const { t, conn } = await open({ ping_interval_s: 0.001, idle_timeout_s: 0.5 });
    expect(t.client.session.limits).toMatchObject({ ping_interval_s: 10, idle_timeout_s: 30 });
    conn.close(1011, 'hub restarting');
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true, limits: { ping_interval_s: 0.001, idle_timeout_s: 0.5 } });
    await readResync(conn2);
    const warnings = t.logger.records.filter((r) => r.level === 'warn' && /timing limit/.test(r.msg));
    expect(warnings.map((w) => [w.field, w.got, w.used])).toEqual([
      ['ping_interval_s', 0.001, 10],
      ['idle_timeout_s', 0.5, 30],
    ]);
  });

  it('a welcome with a max_frame_bytes too small for any real frame is not followed: the operator keeps reporting, and says why once', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true, limits: { max_frame_bytes: 10 } });
    await readResync(conn);
    expect(t.client.session.limits.max_frame_bytes).toBe(1 << 20);
    ackAll(conn);
    t.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    const node = await conn.seen((f) => f.type === 'node.observed' && (f.payload as { ready?: boolean }).ready === false, 'the node reported');
    expect(node.payload).toMatchObject({ node_id: SNAPSHOT.nodes[0]!.node_id });
    const warnings = t.logger.records.filter((r) => r.level === 'warn' && r.field === 'max_frame_bytes');
    expect(warnings.map((w) => [w.got, w.used])).toEqual([[10, 1 << 20]]);
  });

  it('bounds: ping in [1 s, 10 s], idle in [2 × ping, 30 s]; values inside are kept (the e2e hub: 1 s and 3 s)', () => {
    expect(timing({ ping_interval_s: 1, idle_timeout_s: 3 })).toEqual([1, 3]);
    expect(timing({ ping_interval_s: 1, idle_timeout_s: 2 })).toEqual([1, 2]);
    expect(timing({ ping_interval_s: 3, idle_timeout_s: 30 })).toEqual([3, 30]);
    expect(timing({ ping_interval_s: 10, idle_timeout_s: 20 })).toEqual([10, 20]);
    expect(timing({ ping_interval_s: 0.5 })).toEqual([10, 30]);
    expect(timing({ ping_interval_s: 11 })).toEqual([10, 30]);
    expect(timing({ ping_interval_s: Infinity })).toEqual([10, 30]);
    expect(timing({ ping_interval_s: 10, idle_timeout_s: 19 })).toEqual([10, 30]);
    expect(timing({ ping_interval_s: 2, idle_timeout_s: 3.9 })).toEqual([2, 30]);
    expect(timing({ idle_timeout_s: 31 })).toEqual([10, 30]);
    expect(boundedLimits(LIMITS)).toEqual({ limits: LIMITS, adjusted: [] });
  });
});
