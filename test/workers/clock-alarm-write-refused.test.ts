/**
 * The session's clock caches the alarm it set. A write of the alarm that storage refused (a full
 * disk, a refused storage write as in f0d5f7e) left the cache saying it was set: every later
 * `schedule` and `dueBy` for the same deadline skipped the write, and with no alarm stored the
 * deadline (silence, a hole, retention) was never acted on once the object slept (found by
 * review of the hub's timers).
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import type { SessionObject } from '../../src/hub/session/session-object';
import { connect, hubEnv, newCluster } from './support/peer';

type WithClock = { clock: { schedule(notBefore?: number): Promise<void>; lapsed(): void } };

describe('the session clock after a refused alarm write', () => {
  it('writes the alarm again at the next schedule instead of trusting its cache', async () => {
    const c = await newCluster('alarm-refused');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
    const stored = await runInDurableObject(stub, async (instance: SessionObject, state) => {
      const clock = (instance as unknown as WithClock).clock;
      const storage = state.storage;
      const real = storage.setAlarm.bind(storage);
      let refuse = true;
      storage.setAlarm = (async (at: number | Date) => {
        if (refuse) {
          refuse = false;
          throw new Error('SQLITE_FULL: database or disk is full (test)');
        }
        return real(at);
      }) as typeof storage.setAlarm;
      try {
        await storage.deleteAlarm();
        clock.lapsed();
        await expect(clock.schedule()).rejects.toThrow(/SQLITE_FULL/);
        const afterRefusal = await storage.getAlarm();
        // The next schedule, for the same deadline, must write it.
        await clock.schedule();
        return { afterRefusal, afterRetry: await storage.getAlarm() };
      } finally {
        storage.setAlarm = real;
      }
    });
    expect(stored.afterRefusal).toBeNull();
    expect(stored.afterRetry).not.toBeNull();
    a.close();
  });
});
