/**
 * The database's region is read at an isolate's first request that uses the database; a read
 * that failed let every request through, to be read again at the next. A write let through could
 * register a cluster, change desired state or take a claim in another region's database (a
 * DATABASE_URL set to the wrong region's), and nothing after that point checks the region again.
 * Now a failed read lets reads through and answers a write or a connect 503 `unavailable`, to be
 * retried (found by review of the admin API's writes; fails on the code before).
 */
import { describe, expect, inject, it } from 'vitest';
import { pgClient } from '../../scripts/lib/pg-node';
import { fileDatabaseUrl } from '../support/file-database';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { uniqueName } from '../support/peer-core';
import { connectTo, FAST_TIMERS, useHub } from './support/hub';

// Statements give up at 1.5 s: the region's read, waiting on the locked table, fails.
const h = useHub({ ...FAST_TIMERS });

describe("with the region's read failing", () => {
  it('a write is answered 503 and writes nothing, a read goes through; once the region is read, the write goes through', async () => {
    const locker = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
    await locker.connect();
    const name = uniqueName('region-unread');
    try {
      await locker.query('begin');
      await locker.query('lock table hub_region in access exclusive mode');
      const res = await fetch(`${h.hub.url}/admin/clusters`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name }),
      });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(await res.json()).toMatchObject({ error: { code: 'unavailable' } });
      // The connect route, a GET, leads to a claim: refused alike, before any upgrade.
      await expect(connectTo(h.hub, generateEnrollmentToken())).rejects.toThrow('connect: HTTP 503');
      // A read goes on to its route, which meets the database itself.
      expect((await fetch(`${h.hub.url}/admin/clusters`, { headers: { authorization: `Bearer ${h.hub.adminToken}` } })).status).toBe(200);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    expect(await h.sql('select 1 from clusters where name = $1', [name])).toEqual([]);
    expect((await h.admin('POST', '/clusters', { name })).status).toBe(201);
  }, 60_000);
});
