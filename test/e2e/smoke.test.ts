import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHub, type Hub } from './support/worker';

describe('e2e harness', () => {
  let hub: Hub;
  beforeAll(async () => {
    hub = await startHub();
  });
  afterAll(async () => {
    await hub?.stop();
  });

  it('serves /healthz over real HTTP from workerd, backed by Postgres', async () => {
    expect(hub.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${hub.url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true });
  });
});
