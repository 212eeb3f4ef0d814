/**
 * "Each side opens its own stream explicitly with resync.begin and closes it with stream.end."
 * Two observed resyncs requested close together (the fresh session's own and one the application
 * asks for, or the re-observe after an eviction) used to both pass the "already streaming?" check
 * while their snapshot() was pending; the second then replaced the first in the outbox mid-stream,
 * leaving the hub a resync.begin that never ends. Proves that one snapshot is taken and streamed at
 * a time, that a request meanwhile is not lost but runs after the stream's end, and that every
 * resync.begin written is closed by its stream.end, with no two streams interleaved.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ObservedSnapshot } from '../../../src/operator/resync';
import { ackAll, makeClient, readResync, reconnectAfterBackoff, SlowOutboundLog, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('overlapping observed resyncs', () => {
  it('a resync requested while one is pending runs after its stream.end: every resync.begin is closed, none interleaved', async () => {
    const pending: ((s: ObservedSnapshot) => void)[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const t = makeClient(hub, {
      snapshot: () =>
        new Promise<ObservedSnapshot>((resolve) => {
          maxInFlight = Math.max(maxInFlight, ++inFlight);
          pending.push((s) => {
            inFlight--;
            resolve(s);
          });
        }),
    });
    clients.push(t);
    let resolved = 0;
    const resolveNext = () => {
      if (resolved < pending.length) pending[resolved++]!(SNAPSHOT);
    };
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // A small replay window, so a stream takes a few acknowledgements to go out.
    conn.welcome({ session_id: 'S1', full_resync: true, limits: { replay_buffer_frames: 2 } });
    await eventually(() => pending.length === 1, 'the fresh session to ask for its snapshot');
    // The application asks for a reconciliation snapshot meanwhile (legitimate at any time).
    t.client.resync();
    await sleep(20);

    resolveNext();
    const first = await conn.seen((f) => f.type === 'resync.begin', 'the first resync.begin');
    await sleep(20);
    // Whatever else was asked for is answered while the first stream is still going out.
    resolveNext();
    await sleep(20);
    // The hub acknowledges everything, and every snapshot asked for is answered, until the
    // operator has nothing more to say.
    for (let i = 0; i < 60; i++) {
      resolveNext();
      ackAll(conn);
      await sleep(5);
    }
    const begins = conn.frames.filter((f) => f.type === 'resync.begin').map((f) => f.id);
    const ends = conn.frames.filter((f) => f.type === 'stream.end').map((f) => f.reply_to);
    expect(begins).toContain(first.id);
    expect(begins.filter((id) => !ends.includes(id))).toEqual([]);
    // The requested resync was not lost: it followed the first.
    expect(begins).toHaveLength(2);
    // Not interleaved: each stream's frames sit between its begin and its end.
    const at = (pred: (f: (typeof conn.frames)[number]) => boolean) => conn.frames.findIndex(pred);
    const firstEnd = at((f) => f.type === 'stream.end' && f.reply_to === begins[0]);
    const secondBegin = at((f) => f.type === 'resync.begin' && f.id === begins[1]);
    expect(firstEnd).toBeLessThan(secondBegin);
    expect(conn.frames.slice(0, firstEnd).some((f) => f.reply_to === begins[1])).toBe(false);
    // And the application's snapshot() was never asked twice at once.
    expect(maxInFlight).toBe(1);
    expect(conn.closed).toBeNull();
  });
});

/**
 * One observed snapshot at a time: a resync asked for while one streams "runs after its
 * stream.end" (send-side.ts). That includes a stream whose stream.end was numbered on a link
 * that closed before the frame reached the socket: the resumed session replays it, and the
 * snapshot asked for meanwhile (the application's, or the re-observe after an eviction, which
 * is how the hub learns again what the full queue threw away) must still be streamed.
 */
describe('a resync queued behind a stream cut by a reconnect', () => {
  it('is streamed after the resumed session replays the stream.end, not forgotten', async () => {
    const log = new SlowOutboundLog();
    const t = makeClient(hub, { outboundLog: log, idleTimeoutMs: 3_600_000, pingIntervalMs: 3_600_000 });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    await eventually(() => t.client.stats.unacked === 6, 'the opening frames');
    const acked = ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'the hub to acknowledge them');

    // A reconciliation snapshot, and a second one asked for while the first is taken: it queues.
    log.hold();
    t.client.resync();
    t.client.resync();
    // The first stream is numbered, begin to stream.end, and waits for its sync.
    await eventually(() => log.held > 0 && t.client.session.outbound?.nextSeq === acked + 6, 'the stream to be numbered');
    // The link drops before the batch reaches the socket.
    conn.close(1001, 'going away');
    await eventually(() => t.client.state === 'waiting', 'the client to notice the close');
    log.release();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    // The cut stream is replayed whole…
    const replayed = await readResync(conn2);
    expect(replayed.end.payload).toMatchObject({ complete: true, count: 3 });
    ackAll(conn2);
    // …and the snapshot asked for meanwhile follows it.
    const second = await readResync(conn2);
    expect(second.begin.id).not.toBe(replayed.begin.id);
    expect(second.end.payload).toMatchObject({ complete: true, count: 3 });
  });
});
