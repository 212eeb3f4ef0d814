/**
 * An admin write whose statement began before a fresh session's claim committed, and committed
 * after that session had read its resync: its snapshot showed the previous owner, so its poke
 * went there (to the session being displaced) and the new owner learnt of the change only at its
 * next fleet poll. The poll is a minute here, so only the poke can deliver it in time.
 */
import { describe, expect, inject, it } from 'vitest';
import { desired, FAST_TIMERS, holdLock, sleep, useHub, waitingOnLock, type HubHandle } from './support/hub';

const h = useHub({ ...FAST_TIMERS, POLL_INTERVAL_MS: '60000', HANDSHAKE_TIMEOUT_MS: '10000', IDLE_TIMEOUT_MS: '30000', PING_INTERVAL_MS: '5000', PG_QUERY_TIMEOUT_MS: '8000' });
const EMBEDDED = inject('embeddedPostgres');

/** A release that may be called again (the cleanup's) and does nothing then. */
function once(release: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | null = null;
  return () => (done ??= release());
}

async function blockedOn(hub: HubHandle, queryLike: string): Promise<void> {
  for (let i = 0; (await waitingOnLock(hub, queryLike)) < 1; i++) {
    if (i > 200) throw new Error(`no statement like ${queryLike} waits on a lock`);
    await sleep(25);
  }
}

describe('desired write racing a fresh claim', () => {
  it('no foreign key references cluster_owners: the owner recheck (desired-admin.ts) rests on nothing taking FOR KEY SHARE there', async () => {
    // A claim's update under a FOR KEY SHARE leaves a multixact in xmax, which the recheck reads as
    // an old transaction: the poke would go to the displaced session again. A foreign key into
    // cluster_owners is what would take that lock on every insert that references it.
    const refs = await h.sql<{ name: string }>(`select conname as name from pg_constraint where confrelid = 'cluster_owners'::regclass`);
    expect(refs).toEqual([]);
  });

  // PGlite has one backend: the held transactions would block everything.
  it.skipIf(EMBEDDED)("a PUT whose statement began before a fresh session's claim committed reaches that session at once, not at its next fleet poll", async () => {
    const c = await h.newCluster();
    const old = await h.openFresh(c);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/x`, desired({ max_replicas: 1 }))).status).toBe(200);
    await old.peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'x');

    // The claim that displaces the old session stops, holding the cluster row FOR SHARE, at its
    // last step (it trims displacements a day old: this one is held).
    await h.sql(`insert into cluster_displacements (cluster_uid, at, from_session, to_session) values ($1, now() - interval '2 days', 'a', 'b')`, [c.uid]);
    const releaseClaim = once(await holdLock('select 1 from cluster_displacements where cluster_uid = $1 for update', [c.uid]));
    // The PUT, once past the cluster row, waits on its deployment's row until the new session has read its resync.
    const releasePut = once(await holdLock(`select 1 from desired_deployments where cluster_uid = $1 and deployment_id = 'x' for update`, [c.uid]));
    let put: ReturnType<HubHandle['admin']> | undefined;
    try {
      const fresh = await h.connect(c.token);
      const welcome = fresh.hello({ cluster_id: c.name });
      await blockedOn(h, '%insert into cluster_owners%');
      put = h.admin('PUT', `/clusters/${c.name}/deployments/x`, desired({ max_replicas: 7 }));
      await blockedOn(h, '%insert into desired_deployments%');
      await releaseClaim();
      expect((await welcome).payload.full_resync).toBe(true);
      const end = await fresh.next((f) => f.type === 'stream.end');
      expect(end.payload.count).toBe(1);
      await releasePut();
      const r = await put;
      expect(r.status).toBe(200);
      const f = await fresh.next((x) => x.type === 'deployment.desired' && x.payload.revision === r.json.revision, 5_000);
      expect(f.payload).toMatchObject({ deployment_id: 'x', max_replicas: 7 });
      fresh.close();
    } finally {
      await releaseClaim();
      await releasePut();
      await put;
    }
  }, 30_000);
});
