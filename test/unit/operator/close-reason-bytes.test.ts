/**
 * A close reason the SDK builds from the hub's own text (found by a review of the SDK's handshake,
 * 2026-12-04). A frame numbered before the welcome is closed over with the reason
 * `sequenced <type> before welcome`, and `type` is whatever the hub wrote (up to 256 characters).
 * A WebSocket close reason is at most 123 bytes of UTF-8, and `ws` throws a RangeError past that;
 * the transport cut the reason at 120 *characters*, so 60 two-byte characters were enough: the
 * throw escaped the socket's message handler (an uncaught exception: the operator process
 * died), and a process that survived it kept a link marked closing that never closed, so it
 * never dialled again.
 */
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeClient, reconnectAfterBackoff, type TestClient } from './support/harness';
import { ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const fixture = (type: string) => JSON.parse(readFileSync(new URL(`../../../fixtures/${type}.json`, import.meta.url), 'utf8')) as Record<string, unknown>;

describe('a close reason built from the hub\'s text', () => {
  it('a frame numbered before welcome whose type is long non-ASCII text: the link is closed 4400 and the operator dials again', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // The fixture's frame, as a hub that numbers it before any welcome and names it in 120 bytes.
    conn.sendRaw(JSON.stringify({ ...fixture('deployment.desired'), type: 'é'.repeat(60) }));
    const closed = await conn.waitClosed();
    expect(closed.code).toBe(4400);
    expect(Buffer.byteLength(closed.reason, 'utf8')).toBeLessThanOrEqual(123);
    await reconnectAfterBackoff(t);
    const again = await hub.nextConnection();
    expect((await again.nextOf('hello')).payload).toMatchObject({ session_id: null });
  });
});
