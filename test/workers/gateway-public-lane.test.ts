/**
 * Statements anyone can cause without a credential (the connect route's token lookup, /healthz's
 * read) run in a lane of their own in each gateway shard: at most PUBLIC_IN_FLIGHT at once, the
 * rest refused unsent, and never on the shard's first connection, which stays free for the fleet
 * poll, the sessions' checks and claims and the admin's writes. test/hub/connect-flood.test.ts has
 * the flood end to end. Needs a Postgres server: the embedded one has a single backend.
 */
import { env } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import { gatewayStub } from '../../src/hub/address';
import { PUBLIC_IN_FLIGHT } from '../../src/hub/db/gateway-client';
import type { HubEnv } from '../../src/hub/env';

const hubEnv = env as unknown as HubEnv;
const EMBEDDED = inject('embeddedPostgres');
type Answer = { ok: true; value: { rows: Record<string, unknown>[] } } | { ok: false; name: string; message: string };
interface Shard {
  query(text: string, params: unknown[], name?: string, strict?: boolean, lane?: 'public'): Promise<Answer>;
}

function pidOf(a: Answer): number {
  if (!a.ok) throw new Error(`${a.name}: ${a.message}`);
  return Number(a.value.rows[0]?.pid);
}

describe('the gateway lane of public statements', () => {
  it.skipIf(EMBEDDED)('is bounded, refuses the rest unsent, and leaves the first connection to everything else', async () => {
    const shard = gatewayStub(hubEnv, 1) as unknown as Shard;
    // The shard's three connections open (three at once: one on each).
    await Promise.all([0, 1, 2].map(() => shard.query('select pg_backend_pid() as pid', [])));

    // Public statements hold the connections they may use; many more queue behind them.
    const holding = [0, 1].map(() => shard.query('select pg_backend_pid() as pid, pg_sleep(0.8)', [], undefined, false, 'public'));
    await new Promise((r) => setTimeout(r, 100));
    const extra = 40;
    const queued = Array.from({ length: PUBLIC_IN_FLIGHT - 2 + extra }, () => shard.query('select pg_backend_pid() as pid', [], undefined, false, 'public'));
    // A statement of the hub's own (a read) is answered at once, on the connection kept free.
    const t0 = Date.now();
    const own = await shard.query('select pg_backend_pid() as pid', []);
    expect(Date.now() - t0, 'not queued behind the public statements').toBeLessThan(600);

    const answers = await Promise.all([...holding, ...queued]);
    const refused = answers.filter((a): a is Extract<Answer, { ok: false }> => !a.ok);
    expect(refused.length).toBe(extra);
    for (const r of refused) expect(r.name).toBe('GatewayBusyError');
    const publicPids = new Set(answers.filter((a) => a.ok).map(pidOf));
    expect(publicPids.has(pidOf(own)), 'no public statement ran on the connection kept free').toBe(false);
    expect(publicPids.size).toBe(2);

    // Once they are answered, the lane takes public statements again.
    expect((await shard.query('select pg_backend_pid() as pid', [], undefined, false, 'public')).ok).toBe(true);
  });
});
