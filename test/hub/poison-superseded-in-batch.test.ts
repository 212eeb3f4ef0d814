/**
 * A poison frame is recorded however the frames around it were batched.
 *
 * Spec "Poison frames": "A permanently unappliable frame is therefore accepted, discarded, and
 * logged loudly, exactly as an unknown type is. The receiver counts the seq, acks it, and records
 * the rejection with enough detail to identify the sender."
 *
 * Within one ingest statement the last frame about a subject wins (ingest-batch.ts), so a frame
 * superseded in its batch is never written. Found by review: a frame the database refuses
 * (Postgres text holds no NUL; the hub's validation lets it through) followed in the same batch by
 * a valid frame about the same node was acknowledged and left no trace: no rejections row, no
 * answer, no POISON line. Applied one batch apart, the same frames were recorded. The frames
 * here are gathered into one batch by stalling the statement before them on a row lock.
 */
import { describe, expect, inject, it } from 'vitest';
import { eventually, FAST_TIMERS, holdLock, node, useHub, waitingOnLock } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
// The lock is held for as long as the test needs the frames to gather: no statement may give up on it first.
const h = useHub({ ...FAST_TIMERS, PG_LOCK_TIMEOUT_MS: '15000', PG_QUERY_TIMEOUT_MS: '20000', HOLE_TIMEOUT_MS: '30000', IDLE_TIMEOUT_MS: '30000' });
const EMBEDDED = inject('embeddedPostgres');

/** Zod accepts it; Postgres refuses it (22P05): a frame only the database finds poison. */
const dbPoison = (id: string) => ({ ...node(id), name: 'bad\u0000name' });

describe('a poison frame superseded within its ingest batch is still recorded (spec: Poison frames)', () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)('database-refused and hub-rejected frames are recorded, answered and logged whichever frame about the same subject follows them in the batch', async () => {
    const c = await h.newCluster('psup');
    const { peer, sessionId } = await h.openFresh(c);
    const live = async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, any>;
    peer.send('node.observed', node('blocker')); // seq 1
    await peer.ackedThrough(1);

    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'blocker' for update", [c.uid]);
    let held = true;
    const ids: Record<string, string> = {};
    try {
      peer.send('node.observed', node('blocker', false)); // seq 2: a statement of its own, stalled on the lock
      await eventually(async () => ((await waitingOnLock(h, '%cluster_owners%')) === 1 ? true : undefined), 10_000);
      // Everything below arrives while seq 2 waits, so it forms the next batch.
      ids.poisonThenValid = peer.send('node.observed', dbPoison('x1')); // seq 3
      peer.send('node.observed', { ...node('x1'), name: 'x1-valid' }); // seq 4
      peer.send('node.observed', { ...node('x2'), name: 'x2-valid' }); // seq 5
      ids.validThenPoison = peer.send('node.observed', dbPoison('x2')); // seq 6
      ids.poisonThenPoisonA = peer.send('node.observed', dbPoison('x3')); // seq 7
      ids.poisonThenPoisonB = peer.send('node.observed', dbPoison('x3')); // seq 8
      ids.poisonThenRemoved = peer.send('node.observed', dbPoison('x4')); // seq 9
      peer.send('node.removed', { node_id: 'x4' }); // seq 10
      // Hub-side validation poison (a negative count): rejected before Postgres.
      ids.invalidThenValid = peer.send('node.observed', { ...node('x5'), allocatable: { gpus: -1, cpu_millis: 1000, memory_mb: 1024 } }); // seq 11
      peer.send('node.observed', { ...node('x5'), name: 'x5-valid' }); // seq 12
      await eventually(async () => ((await live()).hub_expected === 13 ? true : undefined), 10_000);
      expect(peer.lastAck()).toBe(1);
      await release();
      held = false;
    } finally {
      if (held) await release();
    }
    await peer.ackedThrough(12, 15_000);

    const nodes = await h.sql<{ node_id: string; name: string }>("select node_id, name from nodes where cluster_uid = $1 and node_id like 'x%' order by 1", [c.uid]);
    expect(nodes).toEqual([
      { node_id: 'x1', name: 'x1-valid' },
      { node_id: 'x2', name: 'x2-valid' },
      { node_id: 'x5', name: 'x5-valid' },
    ]);

    const rej = await h.sql<{ session_id: string; seq: string; frame_id: string; type: string; reason: string }>(
      'select session_id, seq, frame_id, type, reason from rejections where cluster_uid = $1 order by seq',
      [c.uid],
    );
    const refused = (seq: number, id: string | undefined) => ({ session_id: sessionId, seq: String(seq), frame_id: id, type: 'node.observed', reason: expect.stringMatching(/database refused/) });
    expect(rej).toEqual([
      refused(3, ids.poisonThenValid),
      refused(6, ids.validThenPoison),
      refused(7, ids.poisonThenPoisonA),
      refused(8, ids.poisonThenPoisonB),
      refused(9, ids.poisonThenRemoved),
      { session_id: sessionId, seq: '11', frame_id: ids.invalidThenValid, type: 'node.observed', reason: expect.stringMatching(/gpus/) },
    ]);

    // Each is answered, as an unknown type is.
    for (const id of Object.values(ids)) {
      const answer = await peer.next((f) => f.type === 'error' && f.reply_to === id, 10_000);
      expect(answer.payload).toMatchObject({ code: 'invalid', retryable: false });
    }
    // And logged loudly, naming the frame.
    await eventually(async () => {
      const loud = lines.filter((l) => l.level === 'error' && l.session === sessionId && /POISON FRAME/.test(l.msg));
      const seqs = new Set(loud.map((l) => Number(l.seq)));
      return [3, 6, 7, 8, 9, 11].every((s) => seqs.has(s)) || undefined;
    }, 10_000);
    expect((await live()).counters).toMatchObject({ rejections: 6, answeredRejections: 6 });
    peer.close();
  });
});
