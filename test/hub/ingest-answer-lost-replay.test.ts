/**
 * An ingest statement that commits on the server while its answer is lost: the hub cannot know
 * whether it applied, withholds the ack, sends the operator away (1013) and the operator replays
 * the same frames (same ids and seqs) on its resume. The rows the frames append (events, the
 * poison frame's rejection, the operation's history) must then exist once, not once per try: the
 * replay of a committed statement is idempotent by frame id and seq. (A guard for what the
 * statement promises, asked for by the review of lost answers of 2026-12-07.)
 */
import { describe, expect, it } from 'vitest';
import { answerResetRelay } from './support/answer-reset-relay';
import { useHubBehindRelay } from './support/proxy-hub';
import { FAST_TIMERS, node, sleep, type Peer } from './support/hub';

const { h, relay } = useHubBehindRelay(
  { ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '5000', IDLE_TIMEOUT_MS: '30000', HOLE_TIMEOUT_MS: '20000', RETENTION_MS: '60000' },
  answerResetRelay('wingsmith_ingest_v'),
);

const event = (subject: string, reason: string) => ({ subject, reason, message: `${reason} on ${subject}`, severity: 'warning' as const, occurred_at: new Date().toISOString() });

describe('an ingest statement committed with its answer lost, then replayed', () => {
  it('leaves each event, rejection and operation report once', async () => {
    const c = await h.newCluster('ing-lost');
    const { peer, sessionId } = await h.openFresh(c);
    const op = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target: 'n-1', params: {}, deadline_s: 300 });
    expect(op.status, JSON.stringify(op.json)).toBe(202);
    const operationId = op.json.operation_id as string;
    const start = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === operationId, 10_000);
    peer.send('node.observed', node('n-1', true)); // seq 1: opens the session's ingest connection
    await peer.ackedThrough(1);

    // Seqs 2 to 6. The first frame after a quiet spell goes alone, in the lean statement (rows
    // only), which the relay lets through; the rest follow together in the full one (a rejection
    // and operation reports are not rows only), which commits and whose answer is lost.
    const frames: { type: string; payload: unknown; id: string; reply_to?: string }[] = [
      { type: 'node.observed', payload: node('n-2', true), id: '' },
      { type: 'node.event', payload: event('n-1', 'NodeNotReady'), id: '' },
      { type: 'node.observed', payload: { ...node(''), node_id: '' }, id: '' }, // poison: a rejection
      { type: 'operation.accepted', payload: { operation_id: operationId }, id: '', reply_to: start.id as string },
      { type: 'operation.result', payload: { operation_id: operationId, outcome: 'succeeded', message: 'cordoned' }, id: '', reply_to: start.id as string },
    ];
    const reset = relay().resetNextAnswer();
    for (const f of frames) f.id = peer.send(f.type as never, f.payload as never, f.reply_to ? { reply_to: f.reply_to } : {});
    await reset;
    expect((await peer.closedWith(15_000)).code, 'the outcome is unknown: the operator is sent away').toBe(1013);
    // The frames before that statement's may have been acknowledged on their own.
    const acked = peer.lastAck() ?? 0;
    expect(acked).toBeLessThan(6);

    // The resume replays what was not acknowledged exactly as sent.
    let again: Peer | null = null;
    for (let attempt = 0; again === null; attempt++) {
      const p = await h.connect(c.token, sessionId);
      try {
        const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
        expect(w.payload['full_resync'], 'resumed').toBe(false);
        again = p;
      } catch (err) {
        p.close();
        if (attempt >= 20) throw err;
        await sleep(300);
      }
    }
    again.nextSeq = acked + 1;
    for (const f of frames.slice(acked - 1)) again.send(f.type as never, f.payload as never, { id: f.id, ...(f.reply_to ? { reply_to: f.reply_to } : {}) });
    await again.ackedThrough(6, 15_000);

    const count = async (q: string) => Number((await h.sql<{ n: string }>(q, [c.uid]))[0]?.n);
    expect({
      events: await count('select count(*) as n from events where cluster_uid = $1'),
      rejections: await count('select count(*) as n from rejections where cluster_uid = $1'),
    }).toEqual({ events: 1, rejections: 1 });
    const got = (await h.admin('GET', `/operations/${operationId}`)).json;
    expect(got).toMatchObject({ state: 'succeeded' });
    const reports = await h.sql<{ n: string; frames: string }>('select count(*) as n, count(distinct frame_id) as frames from operation_events where operation_id = $1', [operationId]);
    expect(reports[0], 'the accepted and the result, once each').toEqual({ n: '2', frames: '2' });
    expect(got.history).toHaveLength(2);
    again.close();
  }, 60_000);
});
