/**
 * How a Pg connection hands statements to the driver when some must be sent by a time or not at
 * all (`within`, the gateway's desired writes): such a statement goes only when nothing else is in
 * the driver, and a statement that ran out its deadline there may still be running on the server.
 * Real workerd, real Postgres (the embedded one runs every connection in one backend).
 */
import { env } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import type { HubEnv } from '../../src/hub/env';
import { Pg } from '../../src/hub/pg';

const hubEnv = env as unknown as HubEnv;
const EMBEDDED = inject('embeddedPostgres');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pidOf = (r: { rows: { pid?: unknown }[] }) => Number(r.rows[0]?.pid);

describe('Pg hand-over of statements with a send-by time', () => {
  it.skipIf(EMBEDDED)('after a statement ran out its deadline on a kept connection and nothing follows, the next one with a send-by time starts a new connection instead of waiting it out', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 10_000, queryTimeoutMs: 800 });
    try {
      const first = pg.query<{ pid: number }>('select pg_backend_pid() as pid, pg_sleep(0.3)');
      // Queued behind the first, it times out 0.8 s after it was asked, 0.5 s after the first's
      // answer: busy, not stalled, so the connection is kept, with this one still running there.
      const long = pg.query('select pg_sleep(3)').catch((e: unknown) => e);
      const pid = pidOf(await first);
      expect((await long as Error).name).toBe('QueryTimeoutError');

      const asked = Date.now();
      const strict = await pg.within(2_000).query<{ pid: number }>('select pg_backend_pid() as pid');
      expect(Date.now() - asked, 'sent at once, not after its send-by time').toBeLessThan(1_000);
      expect(pidOf(strict), 'on a new connection').not.toBe(pid);
    } finally {
      await pg.close();
    }
  });

  it.skipIf(EMBEDDED)('an answer to a statement queued behind the one that ran out its deadline shows it is over: the next one with a send-by time keeps the connection', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 10_000, queryTimeoutMs: 1_000 });
    try {
      const first = pg.query<{ pid: number }>('select pg_backend_pid() as pid, pg_sleep(0.3)');
      // Times out 1 s after it was asked, 0.7 s after the first's answer: the connection is kept,
      // and the server cancels it 1 s after it began (at 1.3 s).
      const long = pg.query('select pg_sleep(3)').catch((e: unknown) => e);
      const pid = pidOf(await first);
      await sleep(500);
      // Handed to the driver before the long one ran out (at 0.8 s), behind it: answered once the
      // server has cancelled the long one.
      const behind = pg.query<{ pid: number }>('select pg_backend_pid() as pid');
      expect((await long as Error).name).toBe('QueryTimeoutError');
      expect(pidOf(await behind)).toBe(pid);

      const strict = await pg.within(2_000).query<{ pid: number }>('select pg_backend_pid() as pid');
      expect(pidOf(strict), 'on the same connection').toBe(pid);
    } finally {
      await pg.close();
    }
  });

});
