/**
 * A var the hub hands to Postgres as an integer must fit one (README "Configuration": a value
 * outside its bounds fails every request naming the var, "never taken for a database outage").
 * Before, both of these were accepted:
 * - CONTENTION_THRESHOLD above 2147483647 (say, to never report contention): /healthz answered
 *   200, and every hello was refused 1013 "registry unavailable; retry", logged as a database
 *   outage, because the claim statement binds it as an int (22003). No operator could connect.
 * - PG_QUERY_TIMEOUT_MS above 2147483647: every connection's statement_timeout was refused by
 *   the server (22023), so /healthz said "database unavailable" and an admin write was a 400
 *   blaming the request's data.
 *
 * Real workerd, real PostgreSQL: each hub runs with the Durable Objects' own configuration.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, useHub } from './support/hub';

const contention = useHub({ ...FAST_TIMERS, CONTENTION_THRESHOLD: '2147483648' });
const queryTimeout = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '2147483648' });

async function errorOf(url: string, init?: RequestInit): Promise<{ status: number; error: unknown }> {
  const r = await fetch(url, init);
  return { status: r.status, error: ((await r.json()) as { error?: unknown }).error };
}

describe('a var Postgres holds as an integer, beyond its range', () => {
  for (const [name, h] of [['CONTENTION_THRESHOLD', contention], ['PG_QUERY_TIMEOUT_MS', queryTimeout]] as const) {
    it(`${name} is refused like any var out of its bounds: 503 unconfigured naming it, not a database failure later`, async () => {
      const expected = { status: 503, error: { code: 'unconfigured', message: expect.stringContaining(name) as unknown as string, field: name } };
      expect(await errorOf(`${h.hub.url}/healthz`)).toEqual(expected);
      expect(
        await errorOf(`${h.hub.url}/admin/clusters`, {
          method: 'POST',
          headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name: `range-${name.toLowerCase()}` }),
        }),
      ).toEqual(expected);
    });
  }
});
