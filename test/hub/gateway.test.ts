/**
 * The shared Postgres gateway: one statement waiting on a lock must not hold up everything else
 * routed to its shard (token lookups, claims, admin calls). One shard here, so every statement
 * shares it.
 */
import { describe, expect, inject, it } from 'vitest';
import { FAST_TIMERS, useHub, holdLock } from './support/hub';

const h = useHub({ ...FAST_TIMERS, DB_GATEWAY_SHARDS: '1', PG_QUERY_TIMEOUT_MS: '5000' });
const EMBEDDED = inject('embeddedPostgres');

describe('database gateway', () => {
  // PGlite has one backend: a held lock or transaction blocks everything, so these need a real server.
  it.skipIf(EMBEDDED)('a claim waiting on a locked row does not hold up other statements on its shard', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
    try {
      const again = await h.connect(c.token, sessionId);
      again.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: peer.hubCursor, lossy: false });
      await new Promise((r) => setTimeout(r, 300));
      // The claim now waits on the lock (for up to the 5 s statement timeout); other work must not.
      const t0 = Date.now();
      const list = await h.admin('GET', '/clusters?limit=1');
      expect(list.status).toBe(200);
      const other = await h.newCluster();
      expect(other.token).toMatch(/^wsmet_/);
      expect(Date.now() - t0).toBeLessThan(2_000);
      again.close();
    } finally {
      await release();
    }
    peer.close();
  });
});
