/**
 * A revocation committed while an ingest batch waits on its fence (spec, Authentication:
 * a disabled or rotated cluster's session is cut with 4403; DESIGN decision 4: every write a
 * session makes is fenced by its claim in the same statement; README: a 4403'd session "is kept
 * for when the cluster is allowed back").
 *
 * The batch's fence locks the cluster row FOR SHARE; here a test transaction has already updated
 * that row (the revocation, uncommitted), so the batch waits on it and then re-checks the newest
 * row version: nothing the operator sent behind the revocation is stored or acknowledged, the
 * session is cut 4403 at once, and (after a disable) re-enabling lets the operator resume the
 * same session and replay the unacknowledged frames, which are then stored. Also: desired state
 * written while the cluster was disabled is delivered after it is enabled again.
 */
import { describe, expect, inject, it } from 'vitest';
import { pgClient } from '../../scripts/lib/pg-node';
import { CloseCode } from '../../src/protocol';
import { fileDatabaseUrl } from '../support/file-database';
import { desired, node, sleep, useHub } from './support/hub';

const EMBEDDED = inject('embeddedPostgres');
const h = useHub({ POLL_INTERVAL_MS: '5000', PG_QUERY_TIMEOUT_MS: '8000', HANDSHAKE_TIMEOUT_MS: '3000', IDLE_TIMEOUT_MS: '30000', PING_INTERVAL_MS: '1000', HOLE_TIMEOUT_MS: '20000' });

/** Run `update` on the cluster row in a transaction, and commit it after `whileHeld` ran. */
async function revokeAround(update: string, uid: string, whileHeld: () => Promise<void>): Promise<void> {
  const client = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
  await client.connect();
  try {
    await client.query('begin');
    await client.query(update, [uid]);
    await whileHeld();
    await client.query('commit');
  } finally {
    await client.end();
  }
}

const nodesOf = async (uid: string) => (await h.sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => r.node_id);

describe('(passing) a revocation racing an in-flight ingest batch', () => {
  // PGlite has one backend: a held transaction blocks everything, so these need a real server.
  it.skipIf(EMBEDDED)('rotation: frames behind it are neither stored nor acknowledged, and the session is cut 4403 at once', async () => {
    const c = await h.newCluster('ingr');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    await revokeAround(`update clusters set token_hash = decode(md5(random()::text) || md5(random()::text), 'hex') where uid = $1`, c.uid, async () => {
      peer.send('node.observed', node('n2'));
      await sleep(500);
    });
    expect((await peer.closedWith(2_500)).code).toBe(CloseCode.REFUSED);
    expect(peer.lastAck()).toBe(1);
    expect(await nodesOf(c.uid)).toEqual(['n1']);
  }, 30_000);

  it.skipIf(EMBEDDED)('disable: nothing stored while disabled; after enable the session resumes and the replay is stored; desired written meanwhile is delivered', async () => {
    const c = await h.newCluster('ingd');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    await revokeAround('update clusters set disabled_at = now() where uid = $1', c.uid, async () => {
      peer.send('node.observed', node('n2'));
      peer.send('node.observed', node('n3'));
      await sleep(500);
    });
    expect((await peer.closedWith(2_500)).code).toBe(CloseCode.REFUSED);
    expect(peer.lastAck()).toBe(1);
    expect(await nodesOf(c.uid)).toEqual(['n1']);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/while-disabled`, desired())).status).toBe(200);

    expect((await h.admin('POST', `/clusters/${c.name}/enable`)).status).toBe(200);
    const again = await h.connect(c.token, sessionId);
    again.hubCursor = peer.hubCursor;
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(w.payload).toMatchObject({ session_id: sessionId, full_resync: false, ack_seq: 1 });
    again.nextSeq = 2;
    again.send('node.observed', node('n2'));
    again.send('node.observed', node('n3'));
    await again.ackedThrough(3);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    const d = await again.next((f) => f.type === 'deployment.desired', 5_000);
    expect(d.payload.deployment_id).toBe('while-disabled');
    again.close();
  }, 30_000);
});
