/**
 * README (session model, Ownership): "Nothing written after a disable or a rotation is pushed to or
 * read by the session it revokes, even in the moment before it is cut (its reads of desired state
 * answer only while its claim holds)."
 *
 * A fresh session's first resync page is read by the gateway right behind the claim
 * (db/claim-snapshot.ts), in a statement of its own. A rotate-token (or disable) that commits
 * between the claim and that read, followed by a PUT carrying a secret, must not land in the
 * page: the read is fenced as the session's own reads are, so the session gets no page, finds at
 * its own fenced read that its claim is gone, and is cut 4403. Before, the page was an unfenced
 * select, and the holder of the revoked token was welcomed and handed the post-rotation
 * deployment (its `serving.env` secret) before the deferred poke cut it (found by a review).
 *
 * The page's read is held for a moment by a test transaction's lock on `operations` (the page
 * query reads that table; the claim, the rotation and the PUT do not), as a migration or any
 * slow read would; the page's deadline (min(1 s, PG_QUERY_TIMEOUT_MS / 4)) is not reached.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, eventually, holdLock, useHub } from './support/hub';

const h = useHub({ POLL_INTERVAL_MS: '5000', PG_QUERY_TIMEOUT_MS: '8000', HANDSHAKE_TIMEOUT_MS: '3000', IDLE_TIMEOUT_MS: '30000', PING_INTERVAL_MS: '1000' });

const SECRET = { HF_TOKEN: 'hf_written_after_the_rotation' };

async function raceFirstPage(revoke: (name: string) => Promise<number>) {
  const c = await h.newCluster('snap');
  expect((await h.admin('PUT', `/clusters/${c.name}/deployments/before`, desired())).status).toBe(200);
  const release = await holdLock('lock table operations in access exclusive mode');
  let released = false;
  try {
    const peer = await h.connect(c.token);
    peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    // The claim has committed and the first page's read waits for the table.
    await eventually(
      async () =>
        (await h.sql<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%open_operations%'`,
        ))[0]!.n > 0,
      5_000,
      10,
    );
    expect(await revoke(c.name)).toBe(200);
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/after-revocation`, desired({ serving: { ...(desired().serving as object), env: SECRET } }));
    expect(put.status).toBe(200);
    await release();
    released = true;
    const closed = await peer.closedWith(8_000).catch(() => null);
    const leaked = peer.frames.filter((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'after-revocation');
    const begin = peer.frames.find((f) => f.type === 'resync.begin');
    return {
      closed: closed?.code ?? 'still open',
      welcomed: peer.frames.some((f) => f.type === 'welcome'),
      // In the fresh session's first resync page (reply_to: its resync.begin), not a later fetch.
      inFirstPage: leaked.some((f) => begin !== undefined && f.reply_to === begin.id),
      leaked: leaked.map((f) => f.payload.serving),
    };
  } finally {
    if (!released) await release();
  }
}

describe('a fresh session\'s first resync page and a revocation right behind its claim', () => {
  it('rotate-token then a PUT with a secret: the revoked session is not handed the PUT', async () => {
    const r = await raceFirstPage(async (name) => (await h.admin('POST', `/clusters/${name}/rotate-token`)).status);
    expect(r.closed).toBe(CloseCode.REFUSED);
    expect(r.leaked, `welcomed: ${r.welcomed}, in the first resync page: ${r.inFirstPage}`).toEqual([]);
  }, 40_000);

  it('disable then a PUT with a secret: the disabled session is not handed the PUT', async () => {
    const r = await raceFirstPage(async (name) => (await h.admin('POST', `/clusters/${name}/disable`)).status);
    expect(r.closed).toBe(CloseCode.REFUSED);
    expect(r.leaked, `welcomed: ${r.welcomed}, in the first resync page: ${r.inFirstPage}`).toEqual([]);
  }, 40_000);
});
