/**
 * State the SDK keeps for as long as the process runs must be bounded, whatever the hub sends.
 * The client remembers which out-of-bounds welcome limits it has warned about, so a hub that sends
 * the same odd value at every connect is logged once (welcome-limits.test.ts). It was keyed by
 * field and value with no cap: a hub sending a different odd value at each welcome (a counter, a
 * timestamp, a misconfiguration that drifts) grew it by up to five entries per connect, for the
 * life of the process.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_REPLAY_BUFFER_BYTES, MAX_REPLAY_BUFFER_FRAMES } from '../../../src/operator/handshake';
import { makeClient, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
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

/** Every limit out of bounds, each by a value no earlier welcome used. */
const oddLimits = (i: number) => ({
  ping_interval_s: 11 + i,
  idle_timeout_s: 31 + i,
  max_frame_bytes: 100 + i,
  replay_buffer_frames: MAX_REPLAY_BUFFER_FRAMES + 1 + i,
  replay_buffer_bytes: MAX_REPLAY_BUFFER_BYTES + 1 + i,
});

/** MAX_LIMIT_WARNINGS in client.ts. */
const BOUND = 64;

const warnedAbout = (t: TestClient) => (t.client as unknown as { limitWarnings: ReadonlySet<string> }).limitWarnings.size;

describe('welcome limit warnings', () => {
  it('a hub sending a new out-of-bounds value at every welcome does not grow the memory of warnings without bound', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    // Five new values a welcome: 200 in all, three times the bound.
    const welcomes = 40;
    for (let i = 0; i < welcomes; i++) {
      if (i > 0) await reconnectAfterBackoff(t);
      const conn = await hub.nextConnection();
      await conn.nextOf('hello');
      conn.welcome({ session_id: `S${i}`, full_resync: true, limits: oddLimits(i) });
      await readResync(conn);
      if (i < welcomes - 1) conn.close(1011, 'hub restarting');
    }
    // Still said: every distinct value was warned about when it came.
    const warnings = t.logger.records.filter((r) => r.level === 'warn' && r.field === 'ping_interval_s');
    expect(warnings).toHaveLength(welcomes);
    expect(warnedAbout(t)).toBeLessThanOrEqual(BOUND);
  });
});
