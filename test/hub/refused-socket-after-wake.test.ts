/**
 * A connection the hub refused carries nothing further, also after the session's object was
 * evicted and woke again. The record that the hub had ended it lived in memory only, so a peer
 * that ignored the hub's close and sent a hello once the object had hibernated was taken for a
 * new connection's first frame: its claim displaced the live session (4409) and, lossy, cost it
 * a full resync (found by a read-only review of the handshake; fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, canonicalPing, CloseCode, newId } from '../../src/protocol';
import { sleep, useHub } from './support/hub';
import { RawSocket } from './support/raw-ws';

const h = useHub({});

const hello = (clusterId: string) =>
  buildFrame({ type: 'hello', payload: { cluster_id: clusterId, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: true }, seq: null, ack: null, reply_to: null, id: newId() });

describe('a connection refused at its hello, whose peer ignores the close', () => {
  it('is not taken for a new connection when it sends a hello after the object woke again: the live session stays', async () => {
    const c = await h.newCluster('refused-wake');
    const a = await h.connect(c.token);
    const sessionId = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    // Routed to the same object by its hint, refused at its hello (it names another cluster).
    const b = await RawSocket.connect(h.hub.url, c.token, sessionId);
    try {
      b.sendText(hello('not-this-cluster'));
      await b.until(() => b.closeFrame !== null, 5_000, 'the refusal');
      expect(b.closeFrame?.code).toBe(CloseCode.PROTOCOL_ERROR);
      const before = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live.instance as string;
      // Idle long enough for workerd to evict the object; A pings as an operator does.
      const pinger = setInterval(() => a.sendRaw(canonicalPing(a.hubCursor)), 10_000);
      try {
        await sleep(25_000);
      } finally {
        clearInterval(pinger);
      }
      // B never answered the close; now it sends a hello that would be welcomed.
      b.sendText(hello(c.name));
      await sleep(2_000);
      expect(a.isClosed, 'the live session was displaced by a connection the hub had refused').toBe(false);
      const view = await h.admin('GET', `/clusters/${c.name}`);
      expect(view.json.session.session_id).toBe(sessionId);
      expect(view.json.session.live.instance, 'the object was evicted and woke again').not.toBe(before);
    } finally {
      b.destroy();
      a.close();
    }
  }, 60_000);
});
