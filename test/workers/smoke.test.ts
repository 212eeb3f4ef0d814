import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { HubEnv } from '../../src/hub/env';
import { queryOnce } from '../../src/hub/pg';

// No generated Cloudflare.Env / GlobalProps here (wrangler types); name the shapes we rely on.
const hubEnv = env as unknown as HubEnv;
const worker = (exports as unknown as { default: Fetcher }).default;

describe('workers harness', () => {
  it('serves /healthz through workerd → Neon driver → proxy → Postgres', async () => {
    const res = await worker.fetch('http://hub.test/healthz');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true });
  });

  it('sees the migrated schema', async () => {
    const { rows } = await queryOnce<{ table: string | null }>(hubEnv, `select to_regclass('public.clusters')::text as table`);
    expect(rows[0]?.table).toBe('clusters');
  });

  it('gets the test bindings', () => {
    expect(hubEnv.ADMIN_TOKEN).toBe('test-admin-token');
    expect(hubEnv.PG_WS_PROXY).toMatch(/^127\.0\.0\.1:\d+$/);
  });
});
