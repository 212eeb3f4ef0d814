/**
 * The hub's resync of a fresh session (desired-pump.ts): resync.begin, every deployment with
 * reply_to = the begin's id, stream.end {complete, count}, then the changes made since, as
 * ordinary deployment.desired frames (reply_to null). A pruneDesired that fails transiently at the
 * stream.end is retried while the frames after it are applied ("reading does not stop at a
 * hole"). The retry used to prune against the snapshot's ids alone, deleting a deployment the hub
 * created after its snapshot and had already delivered (and will not send again): the cluster
 * lost a deployment the hub still wants until the next full resync.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, transient } from '../../../src/operator/handlers';
import { cursorReaches, desiredPayload, makeClient, openWelcomed, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
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

describe('a prune retried after later desired frames were applied', () => {
  it('does not remove a deployment delivered after the snapshot while the prune was waiting for its retry', async () => {
    // The application's desired deployments, as pruneDesired and desired act on them.
    const local = new Set<string>(['old']);
    let pruneAttempts = 0;
    const t = makeClient(hub, {
      handlers: {
        desired: (p) => {
          if (p.deleted) local.delete(p.deployment_id);
          else local.add(p.deployment_id);
          return applied();
        },
        pruneDesired: (keep) => {
          pruneAttempts++;
          if (pruneAttempts === 1) return transient('apiserver: connection refused');
          for (const id of [...local]) if (!keep.has(id)) local.delete(id);
          return applied();
        },
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    // As the real hub: the snapshot first, then the change written after it.
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1', 1), { reply_to: begin.id });
    conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    conn.sendSeq('deployment.desired', desiredPayload('e1', 2));
    await readResync(conn);
    await eventually(() => local.has('e1') && pruneAttempts === 1, 'e1 applied behind the failed prune');
    t.timers.advance(500);
    await cursorReaches(t, 4);
    expect(pruneAttempts).toBe(2);
    expect([...local].sort()).toEqual(['d1', 'e1']);
  });
});

describe('a snapshot replayed by a resume', () => {
  it('does not prune a deployment applied from a frame numbered after the snapshot, which the replay brings only after the stream.end', async () => {
    // A plane that opens a snapshot mid-session, behind a frame whose handler failed: the cursor
    // stays before the begin, so the resume replays the whole stream, its prune included, and
    // then the frames after it. The replayed prune kept only the stream's members and deleted d9,
    // which the hub created after the snapshot (put back a moment later by the replay).
    const local = new Set<string>();
    const log: string[] = [];
    let d0fails = true;
    const t = makeClient(hub, {
      handlers: {
        desired: (p) => {
          if (p.deployment_id === 'd0' && d0fails) return transient('not yet');
          if (p.deleted) local.delete(p.deployment_id);
          else local.add(p.deployment_id);
          log.push(`apply ${p.deployment_id}`);
          return applied();
        },
        pruneDesired: (keep) => {
          for (const id of [...local]) {
            if (keep.has(id)) continue;
            local.delete(id);
            log.push(`prune ${id}`);
          }
          return applied();
        },
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    const f1 = conn.sendSeq('deployment.desired', desiredPayload('d0', 1));
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    const f3 = conn.sendSeq('deployment.desired', desiredPayload('d1', 2), { reply_to: begin.id });
    const f4 = conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    const f5 = conn.sendSeq('deployment.desired', desiredPayload('d9', 3));
    await eventually(() => local.has('d9'), 'd9 applied');
    expect(t.client.session.cursor).toBe(0);

    conn.terminate();
    d0fails = false;
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0 });
    conn2.seqFrom(1);
    conn2.sendSeq('deployment.desired', desiredPayload('d0', 1), { id: f1.id });
    conn2.sendSeq('resync.begin', { scope: ['deployment'] }, { id: begin.id });
    conn2.sendSeq('deployment.desired', desiredPayload('d1', 2), { reply_to: begin.id, id: f3.id });
    conn2.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id, id: f4.id });
    conn2.sendSeq('deployment.desired', desiredPayload('d9', 3), { id: f5.id });
    await cursorReaches(t, 5);
    expect(log.filter((l) => l === 'prune d9'), log.join(', ')).toEqual([]);
    expect([...local].sort()).toEqual(['d1', 'd9']);
  });
});

describe('a frame that failed before a snapshot and is retried after its prune', () => {
  it('does not bring back a deployment the snapshot withdrew', async () => {
    // A plane that opens a snapshot mid-session (the spec allows it), behind a frame whose handler
    // failed: d0 at revision 1 fails, its withdrawal at revision 2 is applied, a complete snapshot
    // without d0 prunes it, and then the frame that failed is retried. The prune had dropped what
    // said revision 2 was applied, and the retry rendered d0 again, which nothing would remove.
    const local = new Set<string>(['d0']);
    let d0fails = true;
    const { t, conn } = await openWelcomed(hub, clients, {
      handlers: {
        desired: (p) => {
          if (p.deployment_id === 'd0' && p.revision === 1 && d0fails) {
            d0fails = false;
            return transient('not yet');
          }
          if (p.deleted) local.delete(p.deployment_id);
          else local.add(p.deployment_id);
          return applied();
        },
        pruneDesired: (keep) => {
          for (const id of [...local]) if (!keep.has(id)) local.delete(id);
          return applied();
        },
      },
    });
    conn.sendSeq('deployment.desired', desiredPayload('d0', 1));
    conn.sendSeq('deployment.desired', desiredPayload('d0', 2, { deleted: true }));
    const begin = conn.sendSeq('resync.begin', { scope: ['deployment'] });
    conn.sendSeq('deployment.desired', desiredPayload('d1', 3), { reply_to: begin.id });
    conn.sendSeq('stream.end', { complete: true, count: 1 }, { reply_to: begin.id });
    await eventually(() => local.has('d1') && !local.has('d0') && !d0fails, 'the snapshot applied and d0 tried once');
    // The retry of the frame that failed (its backoff).
    t.timers.advance(1_000);
    await cursorReaches(t, 5);
    expect([...local].sort()).toEqual(['d1']);
  });
});
