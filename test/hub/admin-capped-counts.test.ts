/**
 * The counts an operator can grow without bound are counted up to COUNT_CAP in the admin views
 * (src/hub/db/capped-count.ts). A rejection is a row per poison frame, kept 30 days: counted
 * whole in the cluster list, the cluster's view and the fleet view, an hour of bad frames from a
 * token holder or a broken operator release made the count alone pass the statement timeout, and
 * every page with that cluster on it answered 503. Found by a read-only review of the admin API.
 */
import { describe, expect, it } from 'vitest';
import { COUNT_CAP } from '../../src/hub/db/capped-count';
import { useHub } from './support/hub';

const h = useHub();

async function reject(uid: string, n: number): Promise<void> {
  await h.sql(
    `insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason, received_at)
     select $1, 'poisoner', g, null, 'node.observed', 'invalid: poison', now() - make_interval(secs => g / 1000.0)
     from generate_series(1, $2::int) g`,
    [uid, n],
  );
}

describe('counts an operator can grow without bound', () => {
  it('rejections are counted up to the cap in the cluster view, the cluster list and the fleet view; below it, exactly', async () => {
    const flood = await h.newCluster('rej-flood');
    const few = await h.newCluster('rej-few');
    await reject(flood.uid, COUNT_CAP + 50);
    await reject(few.uid, 3);

    expect((await h.admin('GET', `/clusters/${flood.name}`)).json.rejections).toBe(COUNT_CAP);
    expect((await h.admin('GET', `/clusters/${few.name}`)).json.rejections).toBe(3);
    const list = (await h.admin('GET', '/clusters?limit=500')).json.items as { uid: string; rejections: number }[];
    expect(list.find((c) => c.uid === flood.uid)?.rejections).toBe(COUNT_CAP);
    expect(list.find((c) => c.uid === few.uid)?.rejections).toBe(3);

    const fleet = (await h.admin('GET', '/fleet')).json;
    const row = (uid: string) => (fleet.items as { uid: string; rejections_1h: number }[]).find((c) => c.uid === uid);
    expect(row(flood.uid)?.rejections_1h).toBe(COUNT_CAP);
    expect(row(few.uid)?.rejections_1h).toBe(3);
    expect(fleet.totals.rejections_1h).toBe(COUNT_CAP);
  });
});
