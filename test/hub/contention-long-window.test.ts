/**
 * A contention window longer than a day (CONTENTION_WINDOW_MS may be set to years) counts the
 * displacements of the whole window. The claim trimmed a cluster's displacement rows older than a
 * fixed day at each displacement, so the count behind the threshold only ever saw the last day,
 * and contention was reported late or never (found by a read-only review of schema and retention;
 * fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, useHub } from './support/hub';

// Two days' window, contention past four displacements in it.
const h = useHub({ ...FAST_TIMERS, CONTENTION_WINDOW_MS: String(2 * 86_400_000), CONTENTION_THRESHOLD: '4' });

describe('contention over a window longer than a day', () => {
  it('counts displacements older than a day but inside the window', async () => {
    const c = await h.newCluster('long-window');
    // Three displacements 30 hours ago: inside the window.
    await h.sql(
      `insert into cluster_displacements (cluster_uid, at, from_session, to_session)
       select $1, now() - interval '30 hours', 'old-' || g, 'old-' || (g + 1) from generate_series(1, 3) g`,
      [c.uid],
    );
    const first = await h.openFresh(c);
    const second = await h.openFresh(c); // the fourth displacement in the window: not past four
    expect((await first.peer.closedWith(5_000)).code).toBe(CloseCode.DISPLACED);
    expect((await h.sql<{ since: string | null }>('select contention_since::text as since from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.since).toBeNull();
    const third = await h.openFresh(c); // the fifth: contention
    expect((await second.peer.closedWith(5_000)).code).toBe(CloseCode.DISPLACED);
    const [row] = await h.sql<{ since: string | null }>('select contention_since::text as since from cluster_owners where cluster_uid = $1', [c.uid]);
    expect(row?.since, 'contention reported once the window holds more than four displacements').not.toBeNull();
    third.peer.close();
  });
});
