/**
 * A Pg connection closes once it has been idle for `idleCloseMs`, counted from its last
 * statement, so an object that stops querying can hibernate; it never closes under a statement in
 * flight, and statements in between keep the same connection. One idle timer stays armed across
 * statements (re-arming it around each one was a measurable share of a burst's CPU), so these
 * are the promises that timer must keep. Real workerd, real Postgres.
 */
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import type { HubEnv } from '../../src/hub/env';
import { Pg } from '../../src/hub/pg';

const hubEnv = env as unknown as HubEnv;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function backendPid(pg: Pg, sql = 'select pg_backend_pid() as pid'): Promise<number> {
  const r = await pg.query<{ pid: number }>(sql);
  return Number(r.rows[0]?.pid);
}

describe('Pg idle close', () => {
  it('closes idleCloseMs after the last statement, not after the first', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 600 });
    try {
      const first = await backendPid(pg);
      // Statements every 200 ms for a second: each restarts the idle period.
      for (let i = 0; i < 5; i++) {
        await sleep(200);
        expect(await backendPid(pg)).toBe(first);
      }
      // 300 ms after the last one: still within its idle period.
      await sleep(300);
      expect(pg.isOpen).toBe(true);
      // Well past it: closed.
      await sleep(900);
      expect(pg.isOpen).toBe(false);
      // And usable again, on a new connection.
      expect(await backendPid(pg)).not.toBe(first);
    } finally {
      await pg.close();
    }
  });

  it('does not close under a statement that outlasts the idle period', async () => {
    const pg = new Pg(hubEnv, { idleCloseMs: 200 });
    try {
      const first = await backendPid(pg);
      // The timer armed by the first statement comes due while this one runs.
      const during = await backendPid(pg, 'select pg_backend_pid() as pid from pg_sleep(0.6)');
      expect(during).toBe(first);
      expect(pg.isOpen).toBe(true);
      await sleep(700);
      expect(pg.isOpen).toBe(false);
    } finally {
      await pg.close();
    }
  });
});
