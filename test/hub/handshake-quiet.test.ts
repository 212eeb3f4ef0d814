/**
 * The 10 s handshake limit at its real value on an otherwise idle hub, measured the way a plain
 * WebSocket client sees it: the close frame (4408) and the end of the TCP connection. Local
 * workerd kept the TCP connection of a socket that never delivered a message until the object
 * was evicted, 10 s later (the close event came at 20 s); the hub now releases it.
 */
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { CloseCode } from '../../src/protocol';
import { useHub } from './support/hub';

// The spec's timers: nothing overridden. This file's hub serves this one connection only.
const h = useHub({});

describe('handshake timeout on a quiet hub (spec: Connection lifecycle)', () => {
  it('a connection that sends no hello is closed 4408 at 10 s, close frame and TCP alike', async () => {
    const c = await h.newCluster();
    const ws = new WebSocket(`${h.hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${c.token}` }, perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const t0 = Date.now();
    let frameAt = 0;
    const receiver = (ws as unknown as { _receiver?: { on(e: 'conclude', f: () => void): void } })._receiver;
    receiver?.on('conclude', () => {
      frameAt = Date.now() - t0;
    });
    const code = await new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
    const closedAt = Date.now() - t0;
    expect(code).toBe(CloseCode.TIMEOUT);
    expect(frameAt).toBeGreaterThanOrEqual(9_500);
    expect(frameAt).toBeLessThan(12_000);
    // The TCP connection ends with the close handshake, not an eviction later.
    expect(closedAt - frameAt).toBeLessThan(2_000);
  }, 40_000);
});
