/**
 * An operation.start is sent only after its frame id is recorded (markOperationsSent), a write
 * fenced by the session's claim. When that record finds the claim gone (displaced, revoked), the
 * session must check its claim at once and be cut, as it is when one of its desired reads finds
 * it gone (desired-read-fence.test.ts), not sit on at the next fleet poll. Before, the pump only
 * stopped: the session stayed open, sending nothing more, until POLL_INTERVAL_MS later.
 *
 * The claim is taken in Postgres directly, in a transaction left open while the operation is
 * created: the session's changes read (no lock, its own snapshot) still sees the claim, and its
 * record waits on the owner row (the fence's FOR SHARE) until the displacement commits, then
 * re-reads the row and finds the claim gone. The fleet poll is an hour away, so only the
 * session's own check can cut it.
 */
import { describe, expect, it, inject } from 'vitest';
import { pgClient } from '../../scripts/lib/pg-node';
import { CloseCode, newId } from '../../src/protocol';
import { fileDatabaseUrl } from '../support/file-database';
import { eventually, FAST_TIMERS, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, POLL_INTERVAL_MS: '3600000', IDLE_TIMEOUT_MS: '30000', PG_QUERY_TIMEOUT_MS: '8000' });

describe("an operation start's record that finds the claim gone", () => {
  it('cuts the session at once (4409 when displaced), and the start is not sent', async () => {
    const c = await h.newCluster('oprec');
    const { peer } = await h.openFresh(c);
    const client = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
    await client.connect();
    let open = true;
    try {
      await client.query('begin');
      // A newer session's claim, as CLAIM_SQL writes it.
      await client.query(`update cluster_owners set session_id = $2, generation = generation + 1 where cluster_uid = $1`, [c.uid, `${newId()}.${newId()}`]);
      const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
      expect(r.status, JSON.stringify(r.json)).toBe(202);
      await eventually(
        async () =>
          (await h.sql<{ n: number }>(
            `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%start_frame_ids%'`,
          ))[0]!.n > 0,
        5_000,
        10,
      );
      await client.query('commit');
      open = false;
      const closed = await peer.closedWith(5_000).catch(() => null);
      expect({ closed: closed?.code ?? 'still open', starts: peer.frames.filter((f) => f.type === 'operation.start').length }).toEqual({
        closed: CloseCode.DISPLACED,
        starts: 0,
      });
    } finally {
      if (open) await client.query('rollback');
      await client.end();
    }
  });
});
