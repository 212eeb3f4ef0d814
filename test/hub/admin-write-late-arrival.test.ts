/**
 * An admin write the hub gave up on writes nothing if it reaches Postgres later. A path that
 * stalled (bytes held in the network, the socket up) and then healed delivered a token rotation
 * after its caller had been answered 504 and rotated again: Postgres started its timeout only on
 * arrival and committed it, replacing the token the admin had been shown with one nobody was, and
 * the cluster could not connect again. Likewise a late disable undid the enable that followed it,
 * and a late PUT put a deployment back as it was before the PUT that followed it (at a newer
 * revision, so the operator was sent it too).
 * Each such write now names when it must have arrived (db/arrival.ts, migration 0030). Found by a
 * read-only review of the hub under a stalled Postgres; fails on the code before.
 *
 * The hub reaches the database through the WS→TCP proxy, whose TCP side goes through a stall relay
 * (support/stall-relay.ts); one gateway connection, so the write asked for during the stall is the
 * one sent into it.
 */
import { describe, expect, it } from 'vitest';
import { hashToken, toHex } from '../../src/hub/tokens';
import { useHubBehindRelay } from './support/proxy-hub';
import { startStallRelay } from './support/stall-relay';
import { desired, FAST_TIMERS, sleep } from './support/hub';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '1500', DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' }, startStallRelay);

/** Repeats `write` until it is answered (the shard may refuse while it gives up on the stalled connection). */
async function until200(write: () => ReturnType<typeof h.admin>) {
  for (let i = 0; ; i++) {
    const r = await write();
    if (r.status === 200) return r;
    if (i >= 20) throw new Error(`not answered 200: ${r.status} ${JSON.stringify(r.json)}`);
    await sleep(300);
  }
}

describe('an admin write delivered after its caller was answered', () => {
  it('a token rotation answered 504, then repeated: the late one writes nothing, and the stored token is the one the admin holds', async () => {
    const c = await h.newCluster('late-rotate');
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    relay().stallOpen();
    const lost = await h.admin('POST', `/clusters/${c.name}/rotate-token`);
    expect(lost.status, JSON.stringify(lost.json)).toBe(504);
    const again = await until200(() => h.admin('POST', `/clusters/${c.name}/rotate-token`));
    const held = again.json.enrollment_token as string;
    // The path heals: the first rotation reaches Postgres now.
    relay().releaseHeld();
    await sleep(1_000);
    const [row] = await h.sql<{ hash: string }>(`select encode(token_hash, 'hex') as hash from clusters where uid = $1`, [c.uid]);
    expect(row?.hash, 'the stored token is the one the admin was shown last').toBe(toHex(await hashToken(held)));
  }, 60_000);

  it('a disable answered 504, then an enable: the late disable writes nothing, and the cluster stays enabled', async () => {
    const c = await h.newCluster('late-disable');
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    relay().stallOpen();
    const lost = await h.admin('POST', `/clusters/${c.name}/disable`);
    expect(lost.status, JSON.stringify(lost.json)).toBe(504);
    await until200(() => h.admin('POST', `/clusters/${c.name}/enable`));
    relay().releaseHeld();
    await sleep(1_000);
    const [row] = await h.sql<{ disabled: boolean }>(`select disabled_at is not null as disabled from clusters where uid = $1`, [c.uid]);
    expect(row?.disabled, 'the enable the admin made last holds').toBe(false);
  }, 60_000);

  it('a desired PUT answered 504, then another of the same deployment: the late one writes nothing, and the deployment is what was put last', async () => {
    const c = await h.newCluster('late-put');
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    relay().stallOpen();
    const lost = await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ max_replicas: 3 }));
    expect(lost.status, JSON.stringify(lost.json)).toBe(504);
    await until200(() => h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ max_replicas: 7 })));
    relay().releaseHeld();
    await sleep(1_000);
    const rows = await h.sql<{ max_replicas: number }>('select max_replicas from desired_deployments where cluster_uid = $1', [c.uid]);
    expect(rows, 'the deployment as the admin put it last').toEqual([{ max_replicas: 7 }]);
  }, 60_000);

  it('a registration answered 504 writes nothing later: the name stays free for the retry', async () => {
    expect((await h.admin('GET', '/clusters?limit=1')).status).toBe(200);
    relay().stallOpen();
    const name = `late-create-${Date.now().toString(36)}`;
    const lost = await h.admin('POST', '/clusters', { name });
    expect(lost.status, JSON.stringify(lost.json)).toBe(504);
    relay().releaseHeld();
    await sleep(1_000);
    expect(await h.sql('select uid from clusters where name = $1', [name]), 'no cluster registered after its 504').toEqual([]);
  }, 60_000);

  it('a location hint answered 504, then another: the late one writes nothing, and the hint is the one set last', async () => {
    const c = await h.newCluster('late-hint');
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    relay().stallOpen();
    const lost = await h.admin('PATCH', `/clusters/${c.name}`, { location_hint: 'weur' });
    expect(lost.status, JSON.stringify(lost.json)).toBe(504);
    await until200(() => h.admin('PATCH', `/clusters/${c.name}`, { location_hint: 'enam' }));
    relay().releaseHeld();
    await sleep(1_000);
    expect(await h.sql('select location_hint from clusters where uid = $1', [c.uid])).toEqual([{ location_hint: 'enam' }]);
  }, 60_000);
});
