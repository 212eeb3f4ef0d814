/**
 * Resuming a session whose replay buffer holds a frame over the hub's current max_frame_bytes.
 * A replay is verbatim (DESIGN: "A replayed frame is re-sent with its original id and seq"), and
 * the hub closes 1009 over "a frame over welcome.limits.max_frame_bytes": frames numbered under an
 * earlier welcome's larger limit can never be delivered again, so replaying them, being closed and
 * resuming the same session would loop forever. Proves that the SDK (1) never writes such a frame:
 * it declines the resume and says `lossy` in its next hello, which brings a fresh session (full
 * resync); and (2) treats a 1009 close of a welcomed link, however it came about, as making the
 * session lossy, so the next hello does not resume it into the same close.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeClient, readResync, reconnectAfterBackoff, SNAPSHOT, type TestClient } from './support/harness';
import { ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const LIMIT = 4096;
const bigLabels: Record<string, string> = {};
for (let i = 0; i < 30; i++) bigLabels[`label-${i}`] = 'x'.repeat(200);

const oversize = (conn: HubConnection) =>
  conn.frames.filter((f) => Buffer.byteLength(f.raw) > LIMIT).map((f) => `${f.type} seq ${f.seq}: ${Buffer.byteLength(f.raw)} B`);

/** A session S1 whose replay buffer holds an unacknowledged frame of more than LIMIT bytes. */
async function sessionWithBigUnackedFrame(): Promise<{ t: TestClient; conn1: HubConnection }> {
  const t = makeClient(hub);
  clients.push(t);
  await t.client.start();
  const conn1 = await hub.nextConnection();
  await conn1.nextOf('hello');
  conn1.welcome({ session_id: 'S1', full_resync: true });
  await readResync(conn1);
  t.client.reportNode({ ...SNAPSHOT.nodes[0]!, labels: bigLabels });
  const big = await conn1.seen((f) => f.type === 'node.observed' && Buffer.byteLength(f.raw) > LIMIT, 'the big node.observed');
  expect(big.seq).not.toBeNull();
  return { t, conn1 };
}

describe('resuming after the hub lowered max_frame_bytes', () => {
  it('never writes a frame over the new limit: it declines the resume and its next hello says lossy, for a fresh session', async () => {
    const { t, conn1 } = await sessionWithBigUnackedFrame();
    // Nothing acknowledged; the link drops.
    conn1.close(1011, 'hub restarting');
    await reconnectAfterBackoff(t);

    const conn2 = await hub.nextConnection();
    const hello2 = await conn2.nextOf('hello');
    expect(hello2.payload).toMatchObject({ session_id: 'S1', lossy: false });
    // The same session resumes, but this hub now accepts at most LIMIT bytes per frame.
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0, limits: { max_frame_bytes: LIMIT } });
    const closed = await conn2.waitClosed();
    expect(closed.code).toBe(4400);
    expect(oversize(conn2)).toEqual([]);
    expect(t.client.session.lossy).toBe(true);
    expect(t.logger.records.some((r) => r.level === 'error' && /cannot resume/.test(r.msg) && /max_frame_bytes/.test(String(r.reason)))).toBe(true);

    await reconnectAfterBackoff(t);
    const conn3 = await hub.nextConnection();
    const hello3 = await conn3.nextOf('hello');
    expect(hello3.payload).toMatchObject({ session_id: 'S1', lossy: true });
    conn3.welcome({ session_id: 'S2', full_resync: true, limits: { max_frame_bytes: LIMIT } });
    const { end } = await readResync(conn3);
    expect(end.payload.complete).toBe(true);
    expect(oversize(conn3)).toEqual([]);
    expect(conn3.closed).toBeNull();
    expect(t.client.session).toMatchObject({ sessionId: 'S2', lossy: false });
  });

  it('a 1009 close of a welcomed link makes the session lossy: the next hello does not resume it', async () => {
    const { t, conn1 } = await sessionWithBigUnackedFrame();
    // As the real hub does (session-object.ts) over a frame it will not take: error, then 1009.
    conn1.refuse({ code: 'invalid', message: 'frame exceeds max_frame_bytes', retryable: false }, 1009);
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    // Resuming would replay the frame the hub refused and be closed the same way, again and again.
    expect(hello.payload.session_id === null || hello.payload.lossy === true).toBe(true);
  });
});
