/**
 * INGEST_LINGER_MS reaches the session object: frames that arrive within the linger of the
 * oldest unapplied one go in one statement, so the first ack the operator gets covers them all
 * (without it, the hub acks the first frame alone: nothing else waited when it arrived).
 */
import { describe, expect, it } from 'vitest';
import { device, useHub } from './support/hub';

const LINGER_MS = 1_000;
const h = useHub({ INGEST_LINGER_MS: String(LINGER_MS) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('ingest linger (INGEST_LINGER_MS)', () => {
  it('three frames 50 ms apart are applied by one statement, acked once the linger has passed', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const before = peer.frames.length;
    const t0 = Date.now();
    peer.send('device.observed', device('GPU-1'));
    await sleep(50);
    peer.send('device.observed', device('GPU-2'));
    await sleep(50);
    peer.send('device.observed', device('GPU-3'));
    await peer.ackedThrough(3, 10_000);
    const acks = peer.frames
      .slice(before)
      .map((f) => f.ack)
      .filter((a): a is number => typeof a === 'number' && a > 0);
    expect(acks[0]).toBe(3);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(LINGER_MS - 50);
    expect(await h.sql('select device_id from devices where cluster_uid = $1 order by device_id', [c.uid])).toEqual([{ device_id: 'GPU-1' }, { device_id: 'GPU-2' }, { device_id: 'GPU-3' }]);
    peer.close();
  });
});
