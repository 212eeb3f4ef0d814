/**
 * "Reconnect backoff is exponential from 1s to 30s with full jitter." The spec says nothing else
 * about the delay after a refusal, so that sentence bounds it too. The SDK used to wait the cap
 * plus up to a fifth of it (30–36 s). Proves that the delay after a refusal is a full-jitter draw
 * under the cap, never past it, spread over the whole range (so a fleet refused at once does not
 * come back in lockstep), and that the delays after it stay at the cap's ceiling.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Backoff } from '../../../src/operator/backoff';
import type { RefusedEvent } from '../../../src/operator/client-types';
import { makeClient, type TestClient } from './support/harness';
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

describe('reconnect delay after a refusal', () => {
  it('the delay after a 4403 never exceeds the 30 s the spec allows', async () => {
    const t = makeClient(hub, { random: () => 0.99 });
    clients.push(t);
    const refused: RefusedEvent[] = [];
    t.client.on('refused', (r) => refused.push(r));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.refuse({ code: 'conflict', message: 'cluster is disabled', retryable: false }, 4403);
    await eventually(() => refused.length === 1, 'the refused event');
    expect(refused[0]!.retryInMs).toBeLessThanOrEqual(30_000);
    expect(t.client.session.nextReconnectInMs).toBeLessThanOrEqual(30_000);
    expect(refused[0]!.retryInMs).toBe(29_700);
  });

  it('is drawn with full jitter under the whole cap, whatever the attempt count, and later delays stay at the cap', () => {
    const draws = [0, 0.25, 0.5, 0.999999];
    expect(draws.map((r) => new Backoff({ baseMs: 1_000, capMs: 30_000 }, () => r).refusal())).toEqual([0, 7_500, 15_000, 30_000]);
    for (let i = 0; i < 1_000; i++) {
      const d = new Backoff({ baseMs: 1_000, capMs: 30_000 }, Math.random).refusal();
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(30_000);
    }
    const b = new Backoff({ baseMs: 1_000, capMs: 30_000 }, () => 0.999999);
    b.refusal();
    expect(b.ceiling()).toBe(30_000);
    expect(b.next()).toBe(30_000);
  });
});
