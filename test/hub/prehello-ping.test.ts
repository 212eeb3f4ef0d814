/**
 * Hello is the first frame of every connection, also of one that reaches an object already
 * carrying a live, idle session (the resume hint routes it there): the runtime's auto-answer to
 * the session's canonical ping is off while any connection is in its handshake, so a ping before
 * hello reaches the hello check (error, 4400) instead of getting the session's pong.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { fixture, frameFrom } from '../support/fixtures';
import { sleep, useHub } from './support/hub';

const h = useHub();

describe('hello is always the first frame, also beside a live session', () => {
  it('a canonical ping sent before hello is answered with an error and 4400, not a pong carrying the session cursor', async () => {
    const c = await h.newCluster();
    const { peer: a, sessionId } = await h.openFresh(c);
    // The live operator acknowledges everything it read (its pings carry its cursor), so the
    // hub's replay buffer is empty: the idle state of any connected operator.
    const lastSent = a.hubCursor;
    a.sendRaw(frameFrom(fixture('ping'), { ack: lastSent }));
    await a.next((f) => f.type === 'pong');
    await sleep(200);

    // A second connection with the same token and the session's hint: its first frame is a ping.
    const b = await h.connect(c.token, sessionId);
    b.sendRaw(frameFrom(fixture('ping'), { ack: lastSent }));
    const first = await b.next(() => true, 3_000);
    expect(first.type, `first answer before any hello: ${JSON.stringify(first)}`).toBe('error');
    expect(first.payload).toMatchObject({ code: 'invalid', retryable: false });
    expect((await b.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
    a.close();
  });
});
