/**
 * Answers owed on the same connection across an eviction: an unknown type and a poison frame are
 * acknowledged while their answers wait behind a full replay window; the idle object is evicted
 * (its socket stays open); the operator then releases the window on that same connection. The
 * answers must be sent once each, numbered right after what the operator has seen, with the
 * hub's ack at the cursor the frames were acknowledged to.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, newId } from '../../src/protocol';
import { FAST_TIMERS, node, sleep, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '10000', IDLE_TIMEOUT_MS: '30000', REPLAY_BUFFER_FRAMES: '2', SEND_QUEUE_FRAMES: '20', RETENTION_MS: '60000' });

describe('answers owed across an eviction on the same connection', () => {
  it('the answers owed when the object was evicted are sent once each after the operator releases its window', async () => {
    const c = await h.newCluster('rw-owed');
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end', 5_000);
    const instance = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live.instance as string;
    const unknownId = newId();
    peer.sendRaw(buildFrame({ type: 'future.thing' as never, payload: {} as never, seq: 1, ack: 0, reply_to: null, id: unknownId }));
    peer.nextSeq = 2;
    const poisonId = peer.send('node.observed', { ...node(''), node_id: '' }, { ack: 0 });
    await peer.ackedThrough(2);
    expect(peer.frames.filter((f) => f.seq !== null).map((f) => f.seq)).toEqual([1, 2]);
    // Idle past workerd's eviction (no frame at all: the silence limit is 30 s).
    await sleep(15_000);
    peer.send('ack', {}, { ack: 2 });
    const a = await peer.next((f) => f.seq === 3, 5_000);
    const b = await peer.next((f) => f.seq === 4, 5_000);
    peer.send('ack', {}, { ack: 4 });
    await sleep(1_500);
    const evicted = (await h.admin('GET', `/clusters/${c.name}`)).json.session?.live?.instance !== instance;
    expect(evicted, 'the object was not evicted meanwhile').toBe(true);
    expect([a.type, a.reply_to, a.ack]).toEqual(['error', unknownId, 2]);
    expect([b.type, b.reply_to, b.ack]).toEqual(['error', poisonId, 2]);
    const answers = peer.frames.filter((f) => f.type === 'error' && (f.reply_to === unknownId || f.reply_to === poisonId));
    expect(answers.length).toBe(2);
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 60_000);
});
