/**
 * welcome.session_id goes back to the hub in the Wingsmith-Session header on every later dial.
 * A session id with a character no header may carry (a newline, anything above U+00FF) made
 * every later dial throw before a socket existed, and, kept in the durable record, after a
 * restart too: the operator never reached the hub again (found by a conformance audit,
 * 2026-12-03). Such a welcome is now unreadable: the SDK closes and dials again without it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../../src/operator/cursor-store';
import { makeClient, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

describe('welcome.session_id the hub chose', () => {
  it.each(['S\u2603', 'S\nX', 'S 1'])('%j, which cannot travel in a header, is refused and the operator dials the hub again without it', async (bad) => {
    const store = new MemoryCursorStore();
    const t = makeClient(hub, { cursorStore: store });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: bad });
    // Let each backoff pass until the hub sees a second dial. A dial already under way is not
    // waited on for a backoff that will not come: on a loaded CI machine one took longer than a
    // fixed pause to reach the hub, and the next wait for a backoff ran out (12 s).
    for (let i = 0; i < 5; i++) {
      const next = await eventually(
        () => (hub.connections.length >= 2 ? 'dialled' : t.client.state === 'waiting' ? 'waiting' : undefined),
        'the operator to dial the hub again or start its backoff',
        12_000,
      );
      if (next === 'dialled') break;
      t.timers.advance(t.client.session.nextReconnectInMs ?? 0);
      await eventually(() => t.client.state !== 'waiting' || hub.connections.length >= 2, 'the backoff to end', 12_000);
    }
    await eventually(() => hub.connections.length >= 2, 'the operator to dial the hub again', 1_000);
    const again = hub.connections[1];
    const hello = await again!.nextOf('hello');
    expect(hello.payload.session_id).toBeNull();
    expect(store.peek()?.sessionId ?? null).not.toBe(bad);
    // And the hub's next, well-formed welcome is taken.
    again!.welcome({ session_id: 'S2' });
    await eventually(() => store.peek()?.sessionId === 'S2', 'the new session to be recorded', 1_000);
    // Room for a loaded machine: its waits are real ones (a CI run beside other work took 5.1 s;
    // another, under its own load alone, waited over 5 s for the first close to be noticed).
  }, 30_000);
});
