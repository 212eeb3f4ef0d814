/**
 * A gateway connection that is busy is not a stalled one. Statements queue on each of a shard's
 * connections; one that waited past PG_QUERY_TIMEOUT_MS (1.5 s here) fails alone, is taken out of
 * the queue, and the connection keeps serving what was queued behind it. (Discarding the
 * connection at the first late statement failed everything queued on it and reconnected under the
 * load that made it late: a connect storm's token lookups and claims collapsed into 503s and
 * 1013s that way.) A connection that answers nothing for a whole deadline is still discarded:
 * test/hub/outage.test.ts. Needs a Postgres server: the embedded one has a single backend.
 */
import { env } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import { gatewayStub } from '../../src/hub/address';
import type { HubEnv } from '../../src/hub/env';

const hubEnv = env as unknown as HubEnv;
// PGlite has one backend: every connection's statements run one after another there.
const EMBEDDED = inject('embeddedPostgres');
type Answer = { ok: true; value: { rows: Record<string, unknown>[] } } | { ok: false; name: string; message: string };

describe('database gateway under congestion', () => {
  it.skipIf(EMBEDDED)('statements late in a long queue time out alone: the connection is kept, and what was queued behind them runs', async () => {
    const shard = gatewayStub(hubEnv, 0) as unknown as { query(text: string, params: unknown[]): Promise<Answer> };
    const pids = async (): Promise<number[]> => {
      const rs = await Promise.all([0, 1, 2].map(() => shard.query('select pg_backend_pid() as pid', [])));
      return rs.map((r) => {
        if (!r.ok) throw new Error(`${r.name}: ${r.message}`);
        return Number(r.value.rows[0]?.pid);
      });
    };
    // The shard's three connections open and answer (three at once: one on each).
    const before = new Set(await pids());
    expect(before.size).toBe(3);
    const probe = `congestion_probe_${Date.now().toString(36)}`;
    await shard.query(`create table ${probe} (k int)`, []);

    // Ten 250 ms statements on each connection: the last of each end 2.5 s in, past the shard's
    // wait for an answer (PG_QUERY_TIMEOUT_MS, 1.5 s, and its margin, 0.3 s: pg.ts answerMarginMs),
    // even when a loaded machine spreads their arrival over half a second (with eight each, as
    // before, a CI run's arrivals spread enough that none was late).
    const N = 30;
    const slow = Array.from({ length: N }, (_, k) => shard.query(`insert into ${probe} select $1::int from pg_sleep(0.25)`, [k]));
    // Queued behind them late enough that what is ahead of them on each connection (eight in the
    // driver's pipeline: pg.ts DRIVER_DEPTH) ends well within their own deadline: sent at 0.7 s,
    // they waited 1.3 of their 1.5 s, and a loaded CI run timed them out.
    await new Promise((r) => setTimeout(r, 1_600));
    const behind = pids();

    const answers = await Promise.all(slow);
    const failed = answers.filter((a): a is Extract<Answer, { ok: false }> => !a.ok);
    expect(failed.length).toBeGreaterThan(0);
    expect(failed.length).toBeLessThan(N);
    for (const f of failed) expect(f.name).toBe('QueryTimeoutError');
    // The same three connections answered the statements queued behind: none was discarded.
    for (const pid of await behind) expect(before.has(pid)).toBe(true);

    // Every statement answered ok ran. Of the late ones, those still running at their deadline
    // finish on the server (the deadlines are staggered by the calls' arrival, so more than one
    // per connection can be); any still queued then was dropped from the queue and never ran
    // (with the margin, at this load, there may be none).
    const counted = await shard.query(`select count(*)::int as n from ${probe}`, []);
    if (!counted.ok) throw new Error(`${counted.name}: ${counted.message}`);
    const applied = Number(counted.value.rows[0]?.n);
    expect(applied).toBeGreaterThanOrEqual(N - failed.length);
    await shard.query(`drop table ${probe}`, []);
  });
});
