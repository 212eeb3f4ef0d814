/**
 * A `desired` handler still running when its link is cut and the reconnect is welcomed into a
 * fresh session (full_resync, a new session id: a database restore, a lost claim) returns into a
 * session that is no longer its own. It recorded its deployment's revision in the new session's
 * applied revisions, which the fresh welcome had just cleared, and the new snapshot's revision of
 * that deployment, lower after a restore, was skipped as superseded: the cluster kept rendering
 * what the plane no longer holds. Its answer (a permanent refusal) likewise joined the new
 * session's owed answers under the old numbering's seq. A prune that returns so recorded the old
 * snapshot's begin seq and kept set in the new session, which then skipped new members as pruned.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, permanent, type HandlerResult } from '../../../src/operator/handlers';
import { desiredPayload, openWelcomed, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

/** A handler call that returns only when released. */
function gate(): { result: Promise<HandlerResult>; release: (r: HandlerResult) => void } {
  let release!: (r: HandlerResult) => void;
  const result = new Promise<HandlerResult>((resolve) => (release = resolve));
  return { result, release };
}

/** Cut the link while the gated handler runs, and welcome the reconnect into the fresh session S2. */
async function freshSessionDuringHandler(held: ReturnType<typeof gate>) {
  const { t, conn } = await openWelcomed(hub, clients, {
    desiredResult: (p) => (p.deployment_id === 'd1' && p.revision === 5 ? held.result : applied()),
  });
  conn.sendSeq('deployment.desired', desiredPayload('d1', 5));
  await eventually(() => t.calls.desired.length === 1, 'the handler to run');
  const again = await reconnectFresh(t, conn);
  return { t, again };
}

/** Cut the link and welcome the reconnect into the fresh session S2. */
async function reconnectFresh(t: TestClient, conn: HubConnection): Promise<HubConnection> {
  conn.close(1013, 'try again later');
  await reconnectAfterBackoff(t);
  const again = await hub.nextConnection();
  await again.nextOf('hello');
  again.welcome({ session_id: 'S2', full_resync: true });
  // The SDK's own resync follows its processing of the welcome: the session is S2 by now.
  await readResync(again);
  return again;
}

describe('a handler that returns after a fresh session began', () => {
  it('leaves no applied revision in the new session: the snapshot\'s lower revision of its deployment is applied', async () => {
    const held = gate();
    const { t, again } = await freshSessionDuringHandler(held);
    held.release(applied());
    await new Promise((r) => setTimeout(r, 20));

    const begin = again.sendSeq('resync.begin', { scope: ['deployment'] });
    again.sendSeq('deployment.desired', desiredPayload('d1', 3), { reply_to: begin.id });
    again.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    await eventually(() => t.client.session.cursor >= 3, 'the snapshot applied');
    expect(t.calls.desired.map((c) => [c.payload.deployment_id, c.payload.revision])).toEqual([
      ['d1', 5],
      ['d1', 3],
    ]);
    expect(t.client.stats.supersededDesired).toBe(0);
  });

  it('sends no answer into the new session for a frame of the old numbering', async () => {
    const held = gate();
    const { t, again } = await freshSessionDuringHandler(held);
    const before = again.frames.length;
    held.release(permanent('the image is not allowed here'));
    await new Promise((r) => setTimeout(r, 20));
    const begin = again.sendSeq('resync.begin', { scope: ['deployment'] });
    again.sendSeq('stream.end', { complete: true, count: 0 }, { reply_to: begin.id });
    await eventually(() => t.client.session.cursor >= 2, 'the empty snapshot applied');
    again.ping(0);
    await again.nextOf('pong');
    expect(again.frames.slice(before).filter((f) => f.type === 'error')).toEqual([]);
  });
});

describe('a prune that returns after a fresh session began', () => {
  // Found by review: the prune's bookkeeping (which deployments a snapshot begun at seq N kept)
  // was recorded in the new session under the old numbering's seq, so the new snapshot's members
  // numbered below it were skipped as pruned, acked and never rendered.
  it('leaves no record of the old snapshot in the new session: the new snapshot\'s members are applied', async () => {
    const held = gate();
    const { t, conn } = await openWelcomed(hub, clients, {
      handlers: { pruneDesired: () => held.result },
    });
    // The old session's snapshot begins at seq 3, behind two ordinary frames.
    conn.sendSeq('deployment.desired', desiredPayload('d0'));
    conn.sendSeq('deployment.desired', desiredPayload('d00'));
    const oldBegin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1'), { reply_to: oldBegin.id });
    conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: oldBegin.id });
    await eventually(() => t.calls.desired.length === 3, 'the old snapshot applied up to its prune');
    const again = await reconnectFresh(t, conn);
    held.release(applied());
    await new Promise((r) => setTimeout(r, 20));

    const begin = again.sendSeq('resync.begin', { scope: ['deployment'] });
    again.sendSeq('deployment.desired', desiredPayload('d2'), { reply_to: begin.id });
    again.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    await eventually(() => t.client.session.cursor >= 3, 'the new snapshot applied');
    expect(t.calls.desired.map((c) => c.payload.deployment_id)).toContain('d2');
    expect(t.client.stats.supersededDesired).toBe(0);
  });
});
