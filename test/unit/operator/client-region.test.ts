/** The SDK tells which region it reached: `welcome.region` on its `welcome` event. */
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Payload } from '../../../src/protocol';
import { makeClient, type TestClient } from './support/harness';
import { ScriptedHub } from './support/scripted-hub';

// The regional hub's welcome exactly as the contract shows it.
const FIXTURE = JSON.parse(readFileSync(new URL('../../../fixtures/welcome.json', import.meta.url), 'utf8')) as { payload: Payload<'welcome'> };

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

async function welcomeEvent(payload: Partial<Payload<'welcome'>>) {
  const t = makeClient(hub);
  clients.push(t);
  const seen = new Promise<{ region: string | null; sessionId: string }>((resolve) => t.client.once('welcome', resolve));
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ ...payload, full_resync: true });
  return seen;
}

describe('the region an operator reached', () => {
  it('is on the welcome event when the hub names one', async () => {
    expect(FIXTURE.payload.region).toBe('eu');
    const { region, limits, ...rest } = FIXTURE.payload;
    void limits;
    const w = await welcomeEvent({ ...rest, region });
    expect(w).toMatchObject({ region: 'eu', sessionId: FIXTURE.payload.session_id });
  });

  it('is null from a hub that names none', async () => {
    const w = await welcomeEvent({ session_id: 'S1' });
    expect(w.region).toBeNull();
  });
});
