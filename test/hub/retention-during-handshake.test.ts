/**
 * Retention comes due while a connection to the object is still in its handshake (an operator
 * reconnecting just as its session's retention period ends). Retention waits for that connection
 * (the hello may resume the session), and the object's alarm must wait with it. Before the fix the
 * clock armed the retention deadline, already past, a millisecond ahead at every alarm, and the
 * object ran its alarm (each one a storage write) hundreds of times a second until the hello or
 * the handshake deadline ended it: up to HANDSHAKE_TIMEOUT_MS (10 s) of spinning in production.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', HANDSHAKE_TIMEOUT_MS: '4000', RETENTION_MS: '2000' });

describe('retention due while a connection is in its handshake', () => {
  it('the object waits for the handshake without spinning its alarm, then deletes its storage', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await sleep(1_000);
    // In its handshake from 1 s to 5 s after the disconnect; retention comes due at 2 s.
    const quiet = await h.connect(c.token, sessionId);
    const alarms = async () => ((await h.admin('GET', `/clusters/${c.name}/session/wakes`)).json?.by_kind?.alarm ?? 0) as number;
    const before = await alarms();
    await sleep(2_000);
    expect((await alarms()) - before).toBeLessThan(5);
    expect((await quiet.closedWith(5_000)).code).toBe(CloseCode.TIMEOUT);
    // Retention then runs: the session is gone, so a resume is a fresh session. Given 3.5 s: the
    // object resets itself when the quiet connection's close comes back (session-object.ts), and a
    // reset that catches the due retention alarm waiting makes the runtime retry it about 2.5 s
    // later (shown in workerd by review, 2026-12-05), which is what made this test flaky under load.
    await sleep(3_500);
    const back = await h.connect(c.token, sessionId);
    const welcome = await back.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 0 });
    expect(welcome.payload.full_resync).toBe(true);
    back.close();
  });
});
