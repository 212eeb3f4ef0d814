/**
 * The spec's timers at their real values (the rest of the suite runs them fast): no hello in
 * 10 s → 4408; 30 s of silence → 4408; a 5 s ownership poll cuts a rotated token's session; the
 * welcome advertises a 10 s ping and a 30 s idle limit.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { useHub } from './support/hub';

const h = useHub({});

describe.concurrent('real timer values (spec: Connection lifecycle, Liveness, Authentication)', () => {
  it('a connection without hello is closed 4408 at 10 s', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const t0 = Date.now();
    expect((await peer.closedWith(20_000)).code).toBe(CloseCode.TIMEOUT);
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(9_500);
    expect(took).toBeLessThan(16_000);
  }, 30_000);

  it('the welcome advertises ping every 10 s and a 30 s idle limit; 30 s of silence closes 4408', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    expect(w.payload.limits).toMatchObject({ ping_interval_s: 10, idle_timeout_s: 30 });
    const t0 = Date.now();
    expect((await peer.closedWith(45_000)).code).toBe(CloseCode.TIMEOUT);
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(28_500);
    expect(took).toBeLessThan(40_000);
  }, 60_000);

  it('pinging every 10 s keeps the session past 30 s', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const pinger = setInterval(() => peer.send('ping', {}), 10_000);
    try {
      await new Promise((r) => setTimeout(r, 35_000));
      expect(peer.isClosed).toBe(false);
    } finally {
      clearInterval(pinger);
      peer.close();
    }
  }, 60_000);

  it('rotating the token cuts the live session within one 5 s poll interval', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const t0 = Date.now();
    await h.admin('POST', `/clusters/${c.name}/rotate-token`);
    expect((await peer.closedWith(15_000)).code).toBe(CloseCode.REFUSED);
    expect(Date.now() - t0).toBeLessThan(8_000);
  }, 30_000);
});
