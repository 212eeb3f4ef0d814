/**
 * The silence rule is per connection ("A peer that has seen no frame of any kind for 30s considers
 * the connection dead and closes it"): only frames on the connection carrying the session count
 * as its life. Frames on other connections to the same object (here: first frames that are not a
 * hello, refused 4400) do not keep a silent active connection open; it is closed 4408 at the limit.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

const IDLE = Number(FAST_TIMERS.IDLE_TIMEOUT_MS);
const h = useHub({ ...FAST_TIMERS });

describe('silence is judged per connection', () => {
  it('control: the same silent connection alone is closed 4408 at the idle limit', async () => {
    const c = await h.newCluster('silc');
    const { peer: silent } = await h.openFresh(c);
    const closed = await silent.closedWith(IDLE + 2_000);
    expect(closed.code).toBe(CloseCode.TIMEOUT);
  }, 30_000);

  it('a silent active connection is closed 4408 even while other connections to its object send frames', async () => {
    const c = await h.newCluster('sil');
    const { peer: silent, sessionId } = await h.openFresh(c);
    const t0 = Date.now();
    // The active connection says nothing more. Meanwhile other connections reach the same object
    // (the resume hint routes them there) and each sends one frame that is not a hello.
    const others: Promise<unknown>[] = [];
    while (!silent.isClosed && Date.now() - t0 < 3 * IDLE) {
      const p = await h.connect(c.token, sessionId);
      p.send('ping', {}, { ack: null });
      others.push(p.closedWith(5_000).catch(() => null));
      await sleep(700);
    }
    await Promise.all(others);
    expect(silent.isClosed, `the silent connection was still open ${Date.now() - t0} ms after its last frame (idle limit ${IDLE} ms)`).toBe(true);
    const closed = await silent.closedWith(1_000);
    expect(closed.code).toBe(CloseCode.TIMEOUT);
  }, 60_000);
});
