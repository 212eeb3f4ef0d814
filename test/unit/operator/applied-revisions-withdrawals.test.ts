/**
 * The SDK remembers the highest revision applied per deployment in a session, so that a replay or
 * an overtaken retry never renders a deployment backwards (applied-revisions.ts). It kept one entry
 * for every deployment the hub ever sent, withdrawn ones included, until a complete hub snapshot
 * (a fresh session) trimmed it: a cluster that creates and withdraws short-lived deployments (a
 * canary per CI run) in a session that lives for months grew it without bound.
 *
 * A withdrawal's entry only ever guards against a frame numbered below the one that withdrew: the
 * hub sends a deployment's revisions in the order it numbers them (one row per deployment, a
 * cluster-wide revision counter, tombstones kept). Once the saved cursor (`hello.resume_from`)
 * has passed the withdrawal, no such frame is delivered again, to this process or the next: the
 * sequencer drops it as a duplicate, and the record the next process starts from names a cursor
 * past it. Until then the entry stays, in memory and in the record.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore, type DurableRecord } from '../../../src/operator/cursor-store';
import { applied, transient } from '../../../src/operator/handlers';
import { ackAll, cursorReaches, desiredPayload, makeClient, openWelcomed, reconnectAfterBackoff, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-review-applied-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

/** The deployments the client remembers an applied revision of. */
const revisions = (t: TestClient) =>
  (t.client as unknown as { s: { appliedRevision: { revisions: ReadonlyMap<string, unknown> } } }).s.appliedRevision.revisions;
const remembered = (t: TestClient) => revisions(t).size;

const put = (id: string, revision: number) => desiredPayload(id, revision);
const withdraw = (id: string, revision: number) => desiredPayload(id, revision, { deleted: true, serving: null });

/** Let the ack's delay pass and wait for the save it makes: the durable cursor reaches `n`. */
async function saved(t: TestClient, n: number): Promise<void> {
  await cursorReaches(t, n);
  t.timers.advance(50);
  await eventually(() => t.client.session.durableCursor >= n || undefined, `durable cursor ${n}`);
}

/** One short-lived deployment: created, then withdrawn. */
async function cycle(t: TestClient, conn: HubConnection, i: number): Promise<void> {
  conn.sendSeq('deployment.desired', put(`canary-${i}`, 2 * i + 1));
  const { seq } = conn.sendSeq('deployment.desired', withdraw(`canary-${i}`, 2 * i + 2));
  await saved(t, seq);
}

describe('applied revisions of withdrawn deployments', () => {
  it('stay bounded over many short-lived deployments created and withdrawn in one long session', async () => {
    const { t, conn } = await open();
    const cycles = 60;
    for (let i = 0; i < cycles; i++) await cycle(t, conn, i);
    // The last withdrawal or two may wait for one more save; the other 58 must be gone.
    expect(remembered(t)).toBeLessThanOrEqual(2);
    // A live deployment is still remembered: only withdrawals the saved cursor passed are dropped.
    const live = conn.sendSeq('deployment.desired', put('live', 1_000));
    await saved(t, live.seq);
    await cycle(t, conn, cycles);
    await cycle(t, conn, cycles + 1);
    expect(revisions(t).has('live')).toBe(true);
    expect(remembered(t)).toBeLessThanOrEqual(3);
    expect(t.client.stats.supersededDesired).toBe(0);
  });

  it('a put overtaken by its withdrawal behind a hole is still skipped when retried, and a replay after the drop resurrects nothing', async () => {
    let failFirstPut = true;
    const { t, conn } = await open({
      desiredResult: (p) => (p.deployment_id === 'canary-0' && !p.deleted && failFirstPut ? ((failFirstPut = false), transient('api server busy')) : applied()),
    });
    // canary-0's put fails (a hole at seq 1); its withdrawal applies behind it, and so do more
    // cycles, all held past the saved cursor by the hole.
    conn.sendSeq('deployment.desired', put('canary-0', 1));
    conn.sendSeq('deployment.desired', withdraw('canary-0', 2));
    for (let i = 1; i < 5; i++) {
      conn.sendSeq('deployment.desired', put(`canary-${i}`, 2 * i + 1));
      conn.sendSeq('deployment.desired', withdraw(`canary-${i}`, 2 * i + 2));
    }
    await eventually(() => t.calls.desired.length === 10 || undefined, 'every frame handled');
    expect(t.client.session.cursor).toBe(0);
    // The retry of the put must not bring canary-0 back: its withdrawal is remembered.
    t.timers.advance(500);
    await saved(t, 10);
    expect(t.calls.desired).toHaveLength(10);
    expect(t.client.stats.supersededDesired).toBe(1);

    // Past the saved cursor now: forgotten at the next save.
    await cycle(t, conn, 5);
    expect(remembered(t)).toBeLessThanOrEqual(2);

    // The link drops; the hub replays what it still holds, from the very first frame (a replay
    // below resume_from is read as duplicates): no withdrawn deployment comes back.
    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 12 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0 });
    conn2.seqFrom(1);
    for (let i = 0; i < 6; i++) {
      conn2.sendSeq('deployment.desired', put(`canary-${i}`, 2 * i + 1));
      conn2.sendSeq('deployment.desired', withdraw(`canary-${i}`, 2 * i + 2));
    }
    await cycle(t, conn2, 6);
    const puts = t.calls.desired.filter((c) => !c.payload.deleted).map((c) => c.payload.deployment_id);
    expect(puts).toEqual(['canary-0', 'canary-1', 'canary-2', 'canary-3', 'canary-4', 'canary-5', 'canary-6']);
  });

  it('a withdrawal the next process takes up from the record still skips the replayed put, and is then forgotten', async () => {
    // On disk, so the record goes through its schema as it does in production.
    const cursorPath = path.join(dir, 'cursor.json');
    const store = new FileCursorStore(cursorPath);
    const onDisk = () => (existsSync(cursorPath) ? (JSON.parse(readFileSync(cursorPath, 'utf8')) as DurableRecord) : null);
    let failFirstPut = true;
    const desiredResult = (p: { deployment_id: string; deleted: boolean }) =>
      p.deployment_id === 'canary-0' && !p.deleted && failFirstPut ? ((failFirstPut = false), transient('api server busy')) : applied();
    const { t: t1, conn } = await open({ cursorStore: store, desiredResult });
    const f1 = conn.sendSeq('deployment.desired', put('canary-0', 1));
    const f2 = conn.sendSeq('deployment.desired', withdraw('canary-0', 2));
    // Saved at once behind the hole.
    await eventually(() => onDisk()?.appliedPastCursor?.some((e) => e.deploymentId === 'canary-0' && e.revision === 2) || undefined, 'the withdrawal in the record');
    // A graceful stop, everything of ours acknowledged: the next process resumes the session.
    const stopping = t1.client.stop({ graceful: true, timeoutMs: 1_000 });
    for (let i = 0; i < 20 && t1.client.state !== 'stopped'; i++) {
      ackAll(conn);
      await new Promise((r) => setTimeout(r, 20));
      t1.timers.advance(100);
    }
    await stopping;

    const t2 = makeClient(hub, { cursorStore: new FileCursorStore(cursorPath), desiredResult });
    clients.push(t2);
    await t2.client.start();
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', resume_from: 0 });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: (t1.client.session.outbound?.nextSeq ?? 1) - 1 });
    conn2.send('deployment.desired', put('canary-0', 1), { seq: 1, id: f1.id });
    conn2.send('deployment.desired', withdraw('canary-0', 2), { seq: 2, id: f2.id });
    conn2.seqFrom(3);
    await saved(t2, 2);
    // Neither replayed frame reached the handler: the put is older than the withdrawal, and the
    // withdrawal is the one already applied.
    expect(t2.calls.desired).toHaveLength(0);
    await cycle(t2, conn2, 1);
    await cycle(t2, conn2, 2);
    expect(revisions(t2).has('canary-0')).toBe(false);
    expect(remembered(t2)).toBeLessThanOrEqual(2);
  });
});

function open(options: Parameters<typeof makeClient>[1] = {}) {
  return openWelcomed(hub, clients, options);
}
