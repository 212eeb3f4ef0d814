/**
 * Desired-state pages are bounded by bytes as well as rows (db/desired.ts, frame-budget.ts): the
 * send queue here is small (512 KiB) against deployments of ~100 KB, so a page sized by rows
 * alone (the claim's first 100, the pump's 1,000) overflows it and the session closes 4429 on
 * every attempt. The queue holds two of the largest frames (MAX_FRAME_BYTES 128 KiB), as the
 * configuration requires.
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: String(128 << 10), SEND_QUEUE_BYTES: String(512 << 10) });

/** `n` deployments of ~100 KB each (under the 128 KiB frame bound): together several times the send queue. */
function large(n: number, prefix: string) {
  const env: Record<string, string> = {};
  for (let i = 0; i < 24; i++) env[`E${i}`] = 'x'.repeat(4096);
  const serving = { ...desired().serving, env };
  return Array.from({ length: n }, (_, i) => ({ deployment_id: `${prefix}-${String(i).padStart(2, '0')}`, ...desired({ serving }) }));
}

describe('desired-state pages bounded by the send queue (spec: Backpressure, hub → operator)', () => {
  it("a fresh session's resync of more bytes than the send queue holds completes without a 4429: the claim's first page and each fetched page fit the queue", async () => {
    const c = await h.newCluster();
    const deployments = large(20, 'snap');
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments })).status).toBe(200);
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const end = await peer.next((x) => x.type === 'stream.end', 10_000).catch((e: unknown) => e);
    expect(end).toMatchObject({ type: 'stream.end', payload: { complete: true, count: 20 } });
    const got = peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.deployment_id);
    expect(got).toEqual(deployments.map((d) => d.deployment_id));
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 30_000);

  it('changes written while the operator was away that total more bytes than the send queue holds reach it on resume, in revision order, without a 4429', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await peer.closed;
    const deployments = large(20, 'away');
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments });
    expect(put.status).toBe(200);
    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(welcome.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    const got: number[] = [];
    while (got.length < 20) {
      const f = await again.next((x) => x.type === 'deployment.desired', 10_000);
      got.push(f.payload.revision as number);
    }
    expect(got).toEqual((put.json.items as { revision: number }[]).map((x) => x.revision));
    expect(again.isClosed).toBe(false);
    again.close();
  }, 30_000);

  it('one bulk write to a live session of more bytes than the send queue holds reaches it in revision order without a 4429: the poke queues its changes only when they fit, else the session pages them', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const deployments = large(20, 'live');
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments });
    expect(put.status).toBe(200);
    const got: number[] = [];
    while (got.length < 20) {
      const f = await peer.next((x) => x.type === 'deployment.desired', 10_000);
      got.push(f.payload.revision as number);
    }
    expect(got).toEqual((put.json.items as { revision: number }[]).map((x) => x.revision));
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 30_000);
});
