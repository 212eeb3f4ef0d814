/**
 * A `deployment.desired` that failed transiently (a hole) while the next revision of the same
 * deployment was refused for good (`permanent`: acked, dropped, answered with `error`).
 *
 * Read in the hub's order the stream is "revision N, then revision N+1", and the spec processes
 * sequenced frames strictly in order: N is rendered, then N+1 is refused and discarded, and the
 * cluster stays at N (the plane sees the refusal of N+1 next to observed revision N). Applying
 * frames past a hole is allowed only because it changes nothing about that outcome ("they are
 * idempotent and delivery is at-least-once"): a transient failure of N withholds its ack so that N
 * is applied later ("will be replayed"), never so that it is skipped. A refused frame is
 * discarded: it has no effect on state, so it does not supersede N. Only a newer revision that was
 * APPLIED supersedes an older one (client-inbound.test.ts: "skips a desired revision older than one
 * already applied"), and a newer one that failed transiently is retried and still wins.
 *
 * So whether N failed once before the refusal, and whether the retry is the SDK's own (link up),
 * the hub's replay after a resume (link dropped), or the next process's (crash), the cluster ends
 * at N, exactly as if N had applied at its first attempt. These tests pin that outcome.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore } from '../../../src/operator/cursor-store';
import { applied, permanent, transient, type HandlerResult } from '../../../src/operator/handlers';
import { FileOutboundLog } from '../../../src/operator/outbound-log';
import type { Payload } from '../../../src/protocol';
import { ackAll, cursorReaches, desiredPayload, makeClient, openWelcomed, readResync, reconnectAfterBackoff, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-desired-after-refusal-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

/**
 * The cluster: what each deployment renders now, every render in order, and the handler's script
 * (`failOnce`: transient at the first attempt only; `refuse`: permanent at every attempt), keyed
 * `deployment@revision`.
 */
function cluster(script: { failOnce?: string[]; refuse?: string[] }) {
  const rendered = new Map<string, number>();
  const renders: string[] = [];
  const failed = new Set<string>();
  const desiredResult = (p: Payload<'deployment.desired'>): HandlerResult => {
    const key = `${p.deployment_id}@${p.revision}`;
    if (script.failOnce?.includes(key) && !failed.has(key)) {
      failed.add(key);
      return transient('api server busy');
    }
    if (script.refuse?.includes(key)) return permanent(`revision ${p.revision} names a GPU model this cluster does not have`);
    rendered.set(p.deployment_id, p.revision);
    renders.push(key);
    return applied();
  };
  return { rendered, renders, desiredResult };
}

const errorsFor = (conn: HubConnection, id: string) => conn.frames.filter((f) => f.type === 'error' && f.reply_to === id);

describe('a desired revision that failed transiently, behind a newer one refused for good', () => {
  it('in order (no hole) the cluster renders N and refuses N+1: the baseline every retry below must reach', async () => {
    const c = cluster({ refuse: ['D@6'] });
    const { t, conn } = await openWelcomed(hub, clients, { desiredResult: c.desiredResult });
    conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const six = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await cursorReaches(t, 2);
    await eventually(() => errorsFor(conn, six.id).length === 1 || undefined, 'the refusal of revision 6');
    expect(c.rendered.get('D')).toBe(5);
    expect(c.renders).toEqual(['D@5']);
  });

  it("the SDK's own retry renders N after N+1 was refused: the refused frame is discarded and supersedes nothing (nor is the retry counted as superseded)", async () => {
    const c = cluster({ failOnce: ['D@5'], refuse: ['D@6'] });
    const { t, conn } = await openWelcomed(hub, clients, { desiredResult: c.desiredResult });
    const five = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const six = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    // 1. revision 5 fails transiently (a hole at seq 1); 2. revision 6 is handled past the hole
    // and refused: answered with an error replying to it, settled as dropped.
    const err = await conn.nextOf('error');
    expect(err.reply_to).toBe(six.id);
    expect(err.payload).toMatchObject({ code: 'invalid', retryable: false });
    expect(t.calls.desired.map((x) => x.payload.revision)).toEqual([5, 6]);
    expect(c.rendered.has('D')).toBe(false);
    expect(t.client.session.cursor).toBe(0); // the hole at seq 1 holds the cursor

    // 3. the retry of seq 1 (the SDK's backoff, the link still up) applies revision 5.
    t.timers.advance(500);
    await cursorReaches(t, 2);
    expect(t.calls.desired.map((x) => x.payload.revision)).toEqual([5, 6, 5]);
    expect(c.rendered.get('D')).toBe(5); // as in order: N rendered, N+1 refused
    expect(t.client.stats.supersededDesired).toBe(0);
    expect(t.client.stats.permanentFailures).toBe(1);
    expect(errorsFor(conn, five.id)).toHaveLength(0);
    expect(errorsFor(conn, six.id)).toHaveLength(1);
    t.timers.advance(100);
    await eventually(() => conn.highestAck >= 2 || undefined, 'both seqs acknowledged');
  });

  it('a newer revision that failed TRANSIENTLY is retried and still wins: the cluster ends at N+1, never back at N', async () => {
    const c = cluster({ failOnce: ['D@5', 'D@6'] });
    const { t, conn } = await openWelcomed(hub, clients, { desiredResult: c.desiredResult });
    conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => t.calls.desired.length === 2, 'both revisions tried');
    expect(c.rendered.has('D')).toBe(false);
    t.timers.advance(500);
    await cursorReaches(t, 2);
    expect(c.rendered.get('D')).toBe(6);
    expect(c.renders.at(-1)).toBe('D@6');
    expect(conn.frames.some((f) => f.type === 'error')).toBe(false);
  });

  it("after the link drops, the hub's replay from the cursor delivers N and N+1 again: N is rendered, N+1 refused again", async () => {
    const c = cluster({ failOnce: ['D@5'], refuse: ['D@6'] });
    const { t, conn } = await openWelcomed(hub, clients, { desiredResult: c.desiredResult });
    const five = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const six = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => errorsFor(conn, six.id).length === 1 || undefined, 'the refusal of revision 6');
    const acked = ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'everything of ours acknowledged');
    conn.terminate(); // the retry timer of seq 1 dies with the link

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: five.id });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: six.id });
    await cursorReaches(t, 2);
    await eventually(() => errorsFor(conn2, six.id).length === 1 || undefined, 'revision 6 refused again');
    expect(c.rendered.get('D')).toBe(5);
    expect(c.renders).toEqual(['D@5']);
    expect(t.client.stats.supersededDesired).toBe(0);
  });

  it('the next process, continuing the session from the durable record after a crash, renders N and refuses N+1 again: the same end state as without the crash', async () => {
    const c = cluster({ failOnce: ['D@5'], refuse: ['D@6'] });
    const cursorPath = path.join(dir, 'cursor.json');
    const logPath = path.join(dir, 'outbound.log');
    const first = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath), outboundLog: await FileOutboundLog.open(logPath), desiredResult: c.desiredResult });
    await first.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await readResync(conn);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    const five = conn.sendSeq('deployment.desired', desiredPayload('D', 5));
    const six = conn.sendSeq('deployment.desired', desiredPayload('D', 6));
    await eventually(() => errorsFor(conn, six.id).length === 1 || undefined, 'the refusal of revision 6');
    const acked = ackAll(conn);
    await eventually(() => first.client.stats.unacked === 0, 'everything of ours acknowledged');
    expect(first.client.session.cursor).toBe(0);
    conn.terminate(); // crash: the first process is abandoned in its backoff (manual timers)
    await eventually(() => first.client.state === 'waiting', 'the first process in its backoff');

    const second = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath), outboundLog: await FileOutboundLog.open(logPath), desiredResult: c.desiredResult });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0, lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    conn2.send('deployment.desired', desiredPayload('D', 5), { seq: 1, id: five.id });
    conn2.send('deployment.desired', desiredPayload('D', 6), { seq: 2, id: six.id });
    await cursorReaches(second, 2);
    await eventually(() => errorsFor(conn2, six.id).length === 1 || undefined, 'revision 6 refused again');
    expect(c.rendered.get('D')).toBe(5);
    expect(c.renders).toEqual(['D@5']);
    expect(second.client.stats.supersededDesired).toBe(0);
  });
});
