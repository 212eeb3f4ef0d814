/**
 * Anyone can mint tokens the connect route takes for enrollment tokens (the shape check is a
 * public checksum, not a secret), and each costs a lookup through a gateway shard. Those lookups
 * queued without bound in the driver of the same connections as everything the hub does for its
 * clusters: a steady flood of them kept every driver queue full, so the admin's token rotation (an
 * admin write, handed to its connection only when nothing else is in the driver, and not at all
 * past 1.5 s) was refused 503 again and again, and the leaked token's session stayed open. Now a
 * connection hands its driver at most a few statements at once, and an admin write goes ahead of
 * those still waiting (pg-handover.ts). Found by a read-only review of the token lifecycle; fails
 * on the code before.
 *
 * The database is 25 ms away each way (a latency relay), so that each lookup holds its connection
 * for a round trip, as across regions.
 */
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { CloseCode } from '../../src/protocol';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { useHubBehindRelay } from './support/proxy-hub';
import { latencyRelay } from './support/latency-relay';
import { FAST_TIMERS, sleep } from './support/hub';

const { h } = useHubBehindRelay(
  {
    ...FAST_TIMERS,
    IDLE_TIMEOUT_MS: '30000',
    PING_INTERVAL_MS: '10000',
    RETENTION_MS: '60000',
    // Nothing but the rotation's own poke may cut the session within the test.
    POLL_INTERVAL_MS: '30000',
    PG_QUERY_TIMEOUT_MS: '8000',
    DB_GATEWAY_SHARDS: '1',
    DB_GATEWAY_CONNECTIONS: '2',
  },
  latencyRelay(25),
);

/**
 * Connects with forged tokens, `loops` at a time, until stopped; counts how each was answered.
 * Each from an address of its own, as a flood from many hosts: one address's refusals are cut short
 * by the connect route's count (connect-refusals.ts, test/workers/connect-refusals-limited.test.ts),
 * and what this guards is the gateway under the flood that count does not stop.
 */
function flood(loops: number): { stop(): Promise<Record<string, number>> } {
  let running = true;
  const seen: Record<string, number> = {};
  let n = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const i = ++n;
      const addr = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
      const ws = new WebSocket(`${h.hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${generateEnrollmentToken()}`, 'cf-connecting-ip': addr }, perMessageDeflate: false });
      const done = (what: string) => {
        seen[what] = (seen[what] ?? 0) + 1;
        ws.terminate();
        resolve();
      };
      ws.once('unexpected-response', (_req, res) => done(`http ${res.statusCode}`));
      ws.once('message', () => done('refused'));
      ws.once('error', () => done('error'));
    });
  const workers = Array.from({ length: loops }, async () => {
    while (running) await one();
  });
  return {
    async stop() {
      running = false;
      await Promise.all(workers);
      return seen;
    },
  };
}

let stopFlood: (() => Promise<Record<string, number>>) | null = null;
afterEach(async () => {
  await stopFlood?.();
  stopFlood = null;
});

describe('a flood of connects with forged tokens', () => {
  it('does not keep the admin from rotating a leaked token, nor the rotation from cutting its session at once', async () => {
    const c = await h.newCluster('flooded');
    const { peer } = await h.openFresh(c);
    const f = flood(150);
    stopFlood = f.stop;
    await sleep(1_500);
    const rotated = await h.admin('POST', `/clusters/${c.name}/rotate-token`);
    expect(rotated.status, JSON.stringify(rotated.json)).toBe(200);
    const closed = await peer.closedWith(5_000);
    expect(closed.code).toBe(CloseCode.REFUSED);
    const seen = await f.stop();
    stopFlood = null;
    // The flood itself was answered (refused, or told to retry later), not left hanging, and
    // reached the lookups: no address of it was over its count.
    expect((seen.refused ?? 0) + (seen['http 503'] ?? 0), JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen['http 429'], JSON.stringify(seen)).toBeUndefined();
  }, 60_000);
});
