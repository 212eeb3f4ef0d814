/**
 * README (Handler outcomes): "the SDK skips a `deployment.desired` whose revision is not newer
 * than one it already applied". A process that continues the session (after a clean stop, or a
 * crash with a durable log) gets the hole replayed (an older revision whose handler failed
 * transiently) and the newer revision applied behind it: it must not render the older one over
 * the newer one the cluster already has. The revisions applied past the cursor are kept in the
 * durable record, saved as soon as one is applied.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { transient, applied } from '../../../src/operator/handlers';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { ackAll, desiredPayload, makeClient, readResync, type TestClient } from './support/harness';
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

describe('deployment.desired revisions across a process restart in one session', () => {
  it('does not apply an older revision over a newer one the previous process applied', async () => {
    const store = new MemoryCursorStore();
    // The cluster's own state: which revision of D is rendered now.
    let rendered = 0;
    let failedOnce = false;
    const desiredResult = (p: { revision: number }) => {
      if (p.revision === 5 && !failedOnce) {
        failedOnce = true;
        return transient('api server busy');
      }
      rendered = p.revision;
      return applied();
    };
    const t1 = makeClient(hub, { cursorStore: store, desiredResult });
    clients.push(t1);
    await t1.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);

    const f1 = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const f2 = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => t1.calls.desired.length === 2, 'both frames handled');
    expect(rendered).toBe(6);
    expect(t1.client.session.cursor).toBe(0); // the hole at seq 1 holds the cursor
    // Saved at once, though the cursor did not move: a crash now must not forget it either.
    await eventually(() => store.peek()?.appliedPastCursor?.some((e) => e.deploymentId === 'D' && e.revision === 6) || undefined, 'revision 6 in the saved record');

    // A graceful stop, everything of ours acknowledged.
    const stopping = t1.client.stop({ graceful: true, timeoutMs: 1_000 });
    for (let i = 0; i < 20 && t1.client.state !== 'stopped'; i++) {
      ackAll(conn);
      await new Promise((r) => setTimeout(r, 20));
      t1.timers.advance(100);
    }
    await stopping;
    expect(store.peek()).toMatchObject({ sessionId: 'S1', clean: true, cursor: 0 });

    // The next process resumes S1; the hub replays from its cursor (0): both frames again.
    const t2 = makeClient(hub, { cursorStore: store, desiredResult });
    clients.push(t2);
    await t2.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: (t1.client.session.outbound?.nextSeq ?? 1) - 1 });
    conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: f1.id! });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: f2.id! });
    await eventually(() => t2.client.session.cursor >= 2 || undefined, 'both replayed frames settled');

    // The cluster had revision 6; it must never be rendered back to revision 5.
    const appliedRevs = t2.calls.desired.map((c) => c.payload.revision);
    expect(appliedRevs).not.toContain(5);
    expect(rendered).toBe(6);
  });
});
