/**
 * The session's resend rule (clock.ts, `resend`) when the wait it stored outlived the frames it
 * was about: an alarm that finds nothing unacknowledged clears the wait and sends nothing. (The
 * rule itself, against a real operator peer, is in test/hub/liveness.test.ts.)
 */
import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import type { SessionObject } from '../../src/hub/session/session-object';
import type { SessionState } from '../../src/hub/session/session-state';
import { connect, hubEnv, newCluster } from './support/peer';

const stateOf = (instance: SessionObject) => (instance as unknown as { state: SessionState }).state;

describe('resend of unacknowledged frames', () => {
  it('an alarm that finds the wait stored but nothing unacknowledged clears it and sends nothing', async () => {
    const c = await newCluster('resend');
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    // The hub's (empty) resync stream, acknowledged.
    const end = await peer.next((f) => f.type === 'stream.end');
    peer.send('ack', {}, { ack: end.seq });
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(welcome.payload.session_id as string) as string });
    await expect.poll(() => runInDurableObject(stub, (i: SessionObject) => stateOf(i).outbound.unacked)).toBe(0);

    const framesBefore = peer.frames.length;
    await runInDurableObject(stub, (i: SessionObject) => {
      const meta = stateOf(i).meta;
      if (!meta) throw new Error('no session');
      meta.ackWaitSince = Date.now() - 10 * 60_000;
    });
    const warn = vi.spyOn(console, 'warn');
    try {
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(warn.mock.calls.map((a) => String(a[0])).filter((l) => l.includes('sending them again'))).toEqual([]);
    } finally {
      warn.mockRestore();
    }
    expect(await runInDurableObject(stub, (i: SessionObject) => stateOf(i).meta?.ackWaitSince ?? null)).toBeNull();
    expect(peer.frames.slice(framesBefore).filter((f) => f.seq !== null)).toEqual([]);
    peer.close();
  });
});
