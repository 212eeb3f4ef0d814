/**
 * The fleet poll keeps its interval whatever one session's check does. A session's check can wait
 * on its cluster's owner row (which every write of that session holds FOR SHARE through its fence)
 * for up to PG_QUERY_TIMEOUT_MS; the poller re-arms before it pokes and does not wait for the
 * pokes, so a session displaced meanwhile in the same shard (its direct poke off) is still cut
 * within one poll interval. And pokes do not pile up on the stuck session: it has at most one
 * poke of the poller in flight.
 *
 * README: "a displaced (4409), disabled or rotated (4403) session is cut within one poll interval".
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';

const POLL = 1_000;
const h = useHub({
  ...FAST_TIMERS,
  IDLE_TIMEOUT_MS: '30000',
  RETENTION_MS: '60000',
  DISPLACEMENT_POKE: 'off',
  DB_GATEWAY_SHARDS: '1',
  POLL_INTERVAL_MS: String(POLL),
  PG_QUERY_TIMEOUT_MS: '6000',
});

describe('one slow session check does not stall the fleet poll of its shard', () => {
  it('control: with no lock held the same displacement is cut within one poll interval', async () => {
    const a = await h.newCluster('ctl-a');
    const b = await h.newCluster('ctl-b');
    const sa = await h.openFresh(a);
    const older = await h.openFresh(b);
    const put = await h.admin('PUT', `/clusters/${a.name}/deployments/d1`, desired());
    expect(put.status).toBe(200);
    await sleep(2 * POLL);
    const t0 = Date.now();
    const newer = await h.openFresh(b);
    const closed = await older.peer.closedWith(15_000);
    expect(closed.code).toBe(CloseCode.DISPLACED);
    expect(Date.now() - t0).toBeLessThan(POLL + 1_000);
    newer.peer.close();
    sa.peer.close();
  }, 30_000);

  it("a displaced session is cut within one poll interval while another session's check waits on a row lock", async () => {
    const a = await h.newCluster('stall-a');
    const b = await h.newCluster('stall-b');
    const sa = await h.openFresh(a);
    const older = await h.openFresh(b);
    // What a long write of session A holds for its duration: its fence, FOR SHARE on A's owner row.
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for share', [a.uid]);
    const checksOfA = async (): Promise<number> => {
      const r = await h.admin('GET', `/clusters/${a.name}/session/wakes`);
      return (r.json?.by_kind?.check ?? 0) as number;
    };
    const before = await checksOfA();
    try {
      // A's desired revision moves: the poll pokes A, whose check waits on that row.
      const put = await h.admin('PUT', `/clusters/${a.name}/deployments/d1`, desired());
      expect(put.status).toBe(200);
      await sleep(2 * POLL);
      // Now B is displaced (no direct poke): only the poll can cut it.
      const t0 = Date.now();
      const newer = await h.openFresh(b);
      const closed = await older.peer.closedWith(15_000);
      const took = Date.now() - t0;
      expect(closed.code, `closed ${JSON.stringify(closed)} after ${took} ms`).toBe(CloseCode.DISPLACED);
      expect(took, `displaced session cut after ${took} ms (poll interval ${POLL} ms)`).toBeLessThan(POLL + 1_000);
      // Several polls found A due meanwhile (its revision is still ahead), well within the
      // statement timeout that its one check waits out: only that one poke reached it.
      expect((await checksOfA()) - before, 'checks of the session stuck behind the lock').toBe(1);
      newer.peer.close();
    } finally {
      await release();
      sa.peer.close();
    }
  }, 60_000);
});
