/**
 * A hub resync whose page read fails part way through: the operator already holds resync.begin and
 * the first pages (numbered, in the replay buffer), and the next page cannot be read (the table
 * held: a migration, an outage, a statement timeout). DESIGN 6: "Full resync from the hub:
 * resync.begin → every deployment.desired … → stream.end {complete: true}". The fetch resumes from
 * the last deployment written, so the stream carries every deployment exactly once and ends
 * complete once the table can be read, with the operator idle meanwhile (only its canonical pings,
 * answered by the runtime). resync-page-retry.test.ts covers a failure at the first page.
 */
import { describe, expect, it } from 'vitest';
import { canonicalPing } from '../../src/protocol';
import { desired, eventually, FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';

// Pages of two; a send queue of five (the claim reads two rows, a fetch at most three ahead); a
// replay window of three, so the operator's ack is what lets the fetch go on.
const h = useHub({ ...FAST_TIMERS, DESIRED_PAGE_ROWS: '2', CLAIM_SNAPSHOT_ROWS: '2', SEND_QUEUE_FRAMES: '5', REPLAY_BUFFER_FRAMES: '3' });

describe('a hub resync whose page read fails part way through', () => {
  it('sends every deployment once and ends with stream.end {complete: true} after the table can be read again', async () => {
    const c = await h.newCluster('rv-midway');
    const ids = ['d1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7'];
    for (const d of ids) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/${d}`, desired())).status).toBe(200);
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    expect(w.payload.full_resync).toBe(true);
    // begin, d1, d2 fill the window; d3–d5 wait in the queue, read ahead (before the table is held).
    await peer.next((f) => f.seq === 3, 5_000);
    await eventually(async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session?.live?.send_queue_frames === 3);
    const release = await holdLock('lock table desired_deployments in access exclusive mode');
    const pinger = setInterval(() => peer.sendRaw(canonicalPing(peer.hubCursor)), 500);
    try {
      // Released: d3–d5 leave, and the fetch after d5 waits on the lock until PG_QUERY_TIMEOUT_MS and fails.
      peer.send('ack', {}, { ack: 3 });
      await peer.next((f) => f.seq === 6, 5_000);
      peer.send('ack', {}, { ack: 6 });
      await sleep(2_500);
      expect(peer.frames.some((f) => f.type === 'stream.end'), 'the resync ended while its table was held').toBe(false);
    } finally {
      await release();
    }
    try {
      const end = await peer.next((f) => f.type === 'stream.end', 8_000);
      expect(end.payload).toEqual({ complete: true, count: ids.length });
    } finally {
      clearInterval(pinger);
    }
    const begin = peer.frames.find((f) => f.type === 'resync.begin');
    const sent = peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => [f.payload.deployment_id, f.reply_to]);
    expect(sent).toEqual(ids.map((d) => [d, begin?.id]));
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 30_000);
});
