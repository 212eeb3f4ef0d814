/**
 * An application whose `snapshot()` answers something that is not an ObservedSnapshot (a list it
 * forgot, `undefined` from a code path that returns nothing) must be refused with a clear error and
 * treated like a snapshot that failed (retried), not crash the process. Before the fix the stream's
 * constructor threw outside the snapshot's try/catch, in a promise nobody awaited: an unhandled
 * rejection (which ends a Node process), and the snapshot the hub was owed was never retried.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ObservedSnapshot } from '../../../src/operator/resync';
import { makeClient, readResync, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (err: unknown) => unhandled.push(err);
beforeEach(async () => {
  hub = await ScriptedHub.start();
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(async () => {
  process.off('unhandledRejection', onUnhandled);
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a snapshot() answer of the wrong shape', () => {
  for (const [what, bad] of [
    ['a snapshot missing its deployments list', { cluster: SNAPSHOT.cluster, nodes: SNAPSHOT.nodes, devices: SNAPSHOT.devices }],
    ['undefined', undefined],
  ] as const) {
    it(`${what}: is logged as a failed snapshot and retried, never an unhandled rejection`, async () => {
      let calls = 0;
      const t = makeClient(hub, {
        snapshot: async () => (++calls === 1 ? (bad as unknown as ObservedSnapshot) : SNAPSHOT),
      });
      clients.push(t);
      await t.client.start();
      const conn = await hub.nextConnection();
      await conn.nextOf('hello');
      conn.welcome({ session_id: 'S1', full_resync: true });
      await eventually(() => calls === 1, 'the first snapshot()');
      await sleep(30);
      expect(unhandled).toEqual([]);
      expect(t.logger.records.some((l) => l.level === 'error' && /snapshot/.test(l.msg))).toBe(true);
      // Reports still flow meanwhile.
      t.client.removeDevice('GPU-gone');
      await conn.seen((f) => f.type === 'device.removed', 'the report');
      // The retry brings the snapshot the fresh session is owed.
      t.timers.advance(1_000);
      const { end } = await readResync(conn);
      expect(end.payload).toEqual({ complete: true, count: 3 });
    });
  }
});
