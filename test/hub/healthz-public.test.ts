/**
 * GET /healthz is public (no bearer). When Postgres refuses, it answers 503 without the driver's
 * error text, which quotes parts of the secret DATABASE_URL (its role, database, host) and the
 * server's internals; the reason goes to the hub's log. Before, the answer carried it verbatim.
 * README: "Secrets: DATABASE_URL, ADMIN_TOKEN".
 */
import { describe, expect, it } from 'vitest';
import { startHub } from '../e2e/support/worker';
import { fileDatabaseUrl } from '../support/file-database';
import { FAST_TIMERS } from './support/hub';

describe('GET /healthz without credentials', () => {
  it('says the database is unavailable without quoting the secret DATABASE_URL or the server error', async () => {
    const url = new URL(await fileDatabaseUrl());
    url.username = 'wingsmith_secret_role_7f3a';
    const hub = await startHub({ vars: { ...FAST_TIMERS, DATABASE_URL: url.toString() } });
    try {
      const r = await fetch(`${hub.url}/healthz`);
      const body = await r.text();
      expect(r.status).toBe(503);
      expect(JSON.parse(body)).toMatchObject({ ok: false, database: 'unavailable' });
      expect(body, 'an unauthenticated answer must not carry any part of the secret DATABASE_URL').not.toContain('wingsmith_secret_role_7f3a');
      expect(body, 'nor the database server\'s own error text').not.toMatch(/does not exist|password|role/i);
    } finally {
      await hub.stop();
    }
  }, 60_000);
});
