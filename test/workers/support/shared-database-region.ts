/**
 * Setup of the workers projects (vitest.config.ts). A database belongs to the first region whose
 * hub reaches it (migration 0025), and a hub of another region refuses it. On a real server each
 * project has a database of its own; the embedded Postgres is one database shared by every file of
 * the run, one file at a time, and the workers and workers-eu projects run hubs of two regions: the
 * claim left by the file before is released, so this file's hub (a new isolate) claims it afresh.
 */
import { env } from 'cloudflare:workers';
import { beforeAll } from 'vitest';
import type { HubEnv } from '../../../src/hub/env';
import { Pg } from '../../../src/hub/pg';

beforeAll(async () => {
  const e = env as unknown as HubEnv & { WINGSMITH_TEST_SHARED_DATABASE?: string };
  if (e.WINGSMITH_TEST_SHARED_DATABASE !== '1') return;
  const pg = new Pg(e);
  try {
    await pg.query('delete from hub_region');
  } finally {
    await pg.close();
  }
});
