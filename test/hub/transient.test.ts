import { describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { pgClient } from '../../scripts/lib/pg-node';
import { FAST_TIMERS, node, useHub } from './support/hub';

const h = useHub();

/** Hold an exclusive lock on `nodes` (a lock held elsewhere: the spec's transient failure). */
async function lockNodes(): Promise<() => Promise<void>> {
  const client = pgClient(inject('databaseUrl'), inject('pgWsProxy'));
  await client.connect();
  await client.query('begin');
  await client.query('lock table nodes in access exclusive mode');
  return async () => {
    await client.query('rollback');
    await client.end();
  };
}

describe('transient failure (spec: Acknowledgement is continuous; Poison frames)', () => {
  it('while a lock is held the ack is withheld; when it is released the same frames apply and are acknowledged, nothing lost', async () => {
    if (inject('embeddedPostgres')) return; // PGlite has one backend: a held transaction blocks everything.
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const release = await lockNodes();
    try {
      for (let i = 1; i <= 5; i++) peer.send('node.observed', node(`n${i}`));
      await new Promise((r) => setTimeout(r, 1_000));
      expect(peer.lastAck() ?? 0).toBe(0);
      // Keep the link alive while the database is blocked.
      peer.send('ping', {});
    } finally {
      await release();
    }
    await peer.ackedThrough(5, 10_000);
    const rows = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]);
    expect(Number(rows[0]?.n)).toBe(5);
    peer.close();
  });

  it('a hole left open past the limit makes the hub close (1013) so the operator replays from the cursor', async () => {
    if (inject('embeddedPostgres')) return;
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n0'));
    await peer.ackedThrough(1);
    const release = await lockNodes();
    let closed;
    try {
      peer.send('node.observed', node('n1'));
      const pinger = setInterval(() => peer.send('ping', {}), 500);
      try {
        closed = await peer.closedWith(Number(FAST_TIMERS.HOLE_TIMEOUT_MS) + 5_000);
      } finally {
        clearInterval(pinger);
      }
    } finally {
      await release();
    }
    expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(peer.frames.find((f) => f.type === 'error' && f.seq === null)?.payload).toMatchObject({ code: 'unavailable', retryable: true });
    // Resume and replay the unacknowledged frame.
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(w.payload.full_resync).toBe(false);
    // Whatever was applied before the close is acknowledged in the welcome; the rest is replayed.
    const ackSeq = w.payload.ack_seq as number;
    expect([1, 2]).toContain(ackSeq);
    if (ackSeq < 2) again.send('node.observed', node('n1'), { seq: 2 });
    await again.ackedThrough(2, 10_000);
    expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.node_id)).toEqual(['n0', 'n1']);
    again.close();
  });
});
