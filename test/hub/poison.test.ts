import { describe, expect, inject, it } from 'vitest';
import { buildFrame, newId } from '../../src/protocol';
import { eventually, holdLock, node, useHub, type Peer } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

describe('poison frames (spec: Poison frames)', () => {
  it('a payload that violates its schema is accepted, acknowledged, dropped and recorded; the stream behind it advances', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    const badId = peer.send('node.observed', { ...node(''), node_id: '' });
    peer.send('deployment.observed', {
      deployment_id: 'd1',
      observed_revision: 1,
      phase: 'ready',
      ready_replicas: 5,
      replica_ids: ['a'],
      message: 'more ready than named: a stated invariant broken',
    });
    peer.send('node.observed', node('n3'));
    await peer.ackedThrough(4);
    expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.node_id)).toEqual(['n1', 'n3']);
    const rej = await h.sql('select session_id, seq, frame_id, type, reason from rejections where cluster_uid = $1 order by seq', [c.uid]);
    expect(rej).toMatchObject([
      { session_id: sessionId, seq: '2', frame_id: badId, type: 'node.observed', reason: expect.stringMatching(/node_id/) },
      { session_id: sessionId, seq: '3', type: 'deployment.observed', reason: expect.stringMatching(/ready_replicas/) },
    ]);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.rejections).toBe(2);
    peer.close();
  });

  it('a frame the database itself refuses is found by splitting the batch and rejected alone; its neighbours apply', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    for (let i = 1; i <= 9; i++) peer.send('node.observed', node(`n${i}`));
    // Postgres text cannot hold NUL: zod accepts the string, the database refuses it.
    peer.send('node.observed', { ...node('n10'), name: 'bad\u0000name' });
    for (let i = 11; i <= 20; i++) peer.send('node.observed', node(`n${i}`));
    await peer.ackedThrough(20, 10_000);
    const rows = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]);
    expect(Number(rows[0]?.n)).toBe(19);
    const rej = await h.sql('select seq, reason from rejections where cluster_uid = $1', [c.uid]);
    expect(rej).toMatchObject([{ seq: '10', reason: expect.stringMatching(/database refused/) }]);
    peer.close();
  });

  it('a frame with a malformed envelope id is poison, not fatal', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.observed', id: 'not-a-ulid', seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: node('n1') }));
    peer.send('node.observed', node('n2'), { seq: 2, id: newId() });
    await peer.ackedThrough(2);
    expect(peer.isClosed).toBe(false);
    expect(await h.sql('select seq, frame_id from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', frame_id: 'not-a-ulid' }]);
    peer.close();
  });

  it('a poison frame is answered with a sequenced error naming the reason, exactly as an unknown type is', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const badId = peer.send('node.observed', { ...node(''), node_id: '' });
    const refusedId = peer.send('node.observed', { ...node('n-nul'), name: 'bad\u0000name' });
    await peer.ackedThrough(2);
    const schemaAnswer = await peer.next((f) => f.type === 'error' && f.reply_to === badId);
    expect(schemaAnswer.seq).not.toBeNull();
    expect(schemaAnswer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringMatching(/node_id/) });
    const dbAnswer = await peer.next((f) => f.type === 'error' && f.reply_to === refusedId, 10_000);
    expect(dbAnswer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringMatching(/database refused/) });
    expect(peer.isClosed).toBe(false);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.session.live.counters).toMatchObject({ answeredRejections: 2 });
    peer.close();
  });

  it('an operation frame naming an operation this cluster does not have is recorded as a rejection and answered', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const stray = newId();
    const id = peer.send('operation.progress', { operation_id: stray, phase: 'draining', message: 'half way' });
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(2);
    const answer = await peer.next((f) => f.type === 'error' && f.reply_to === id);
    expect(answer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringContaining(stray) });
    expect(await h.sql('select session_id, seq, frame_id, type from rejections where cluster_uid = $1', [c.uid])).toEqual([
      { session_id: sessionId, seq: '1', frame_id: id, type: 'operation.progress' },
    ]);
    peer.close();
  });
  // Spec "Poison frames": a rejected frame is answered with a sequenced error, as an unknown type
  // is; a frame committed past a hole is delivered again by the resume that replays from the
  // cursor and committed again, and it must not be answered again (found by review: each of these
  // got a second error after the resume, and answeredRejections counted it twice).
  it.skipIf(EMBEDDED)('a rejected frame committed past a hole and replayed after a resume is answered once (poison, an unknown operation, an unknown type)', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1')); // seq 1
    await peer.ackedThrough(1);
    const unknownType = (p: Peer, seq: number, id: string) =>
      p.sendRaw(buildFrame({ type: 'future.thing' as never, payload: {} as never, seq, ack: p.hubCursor, reply_to: null, id }));
    const stray = newId();
    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'n1' for update", [c.uid]);
    let released = false;
    try {
      const holeId = peer.send('node.observed', node('n1', false)); // seq 2: waits on the lock (a hole)
      const poisonId = peer.send('node.observed', { ...node(''), node_id: '' }); // seq 3
      const strayId = peer.send('operation.accepted', { operation_id: stray }); // seq 4
      const unknownId = newId();
      unknownType(peer, 5, unknownId);
      peer.nextSeq = 6;
      // All three are committed past the hole, and answered.
      const answered = (p: Peer, id: string) => p.frames.some((f) => f.type === 'error' && f.reply_to === id);
      await eventually(async () => [poisonId, strayId, unknownId].every((id) => answered(peer, id)) || undefined, 10_000);
      // Read (process) everything the hub sent, as an operator does: its resume names that point.
      const top = Math.max(...peer.frames.map((f) => f.seq ?? 0));
      await peer.next((f) => f.seq === top);
      await eventually(async () => (await h.sql('select 1 from rejections where cluster_uid = $1', [c.uid])).length === 3 || undefined, 10_000);
      expect(peer.lastAck()).toBe(1);

      // The operator resumes and replays everything after the hub's cursor with its original id and seq.
      const again = await h.connect(c.token, sessionId);
      const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
      expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 1 });
      again.hubCursor = peer.hubCursor;
      again.nextSeq = 2;
      again.send('node.observed', node('n1', false), { id: holeId });
      again.send('node.observed', { ...node(''), node_id: '' }, { id: poisonId });
      again.send('operation.accepted', { operation_id: stray }, { id: strayId });
      unknownType(again, 5, unknownId);
      again.nextSeq = 6;
      await release();
      released = true;
      await again.ackedThrough(5, 10_000);
      // A new poison frame, committed after the replay: its answer is numbered after any answer
      // the replay produced, so once it is here every answer to the replay is too.
      const lastId = again.send('node.observed', { ...node(''), node_id: '' }); // seq 6
      await eventually(async () => answered(again, lastId) || undefined, 10_000);
      // Distinct hub seqs: the hub re-sends, under their own seq, its frames the operator had not acknowledged.
      const answers = (id: string) => new Set([...peer.frames, ...again.frames].filter((f) => f.type === 'error' && f.reply_to === id).map((f) => f.seq)).size;
      expect({ poison: answers(poisonId), stray: answers(strayId), unknown: answers(unknownId) }).toEqual({ poison: 1, stray: 1, unknown: 1 });
      const view = await h.admin('GET', `/clusters/${c.name}`);
      expect(view.json.session.live.counters).toMatchObject({ rejections: 3, unknownTypes: 1, answeredRejections: 3 });
      again.close();
    } finally {
      if (!released) await release();
    }
  });

  // Spec "Envelope": an unknown type is dropped and answered; "Sequence numbers and resume": a frame
  // not acknowledged is replayed. An unknown type whose batch never committed (the link dropped
  // first) comes back after the resume: it must be answered once in all, not once per delivery
  // (found by review: it was answered on arrival, so the replay got a second error).
  it.skipIf(EMBEDDED)('an unknown type whose batch never committed before the link dropped is answered once, not again when the resume replays it', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1')); // seq 1
    await peer.ackedThrough(1);
    // Its rejection row cannot be written while this is held: the batch waits, and never commits on this link.
    const release = await holdLock('lock table rejections in share mode');
    let released = false;
    try {
      const unknownId = newId();
      const unknownType = (p: Peer) => p.sendRaw(buildFrame({ type: 'future.thing' as never, payload: {} as never, seq: 2, ack: p.hubCursor, reply_to: null, id: unknownId }));
      unknownType(peer);
      await eventually(async () => (await h.sql("select 1 from pg_locks where relation = 'rejections'::regclass and not granted")).length > 0 || undefined, 10_000);
      // What the hub sent meanwhile is read (processed) before the link drops: its resume names that point.
      const top = Math.max(0, ...peer.frames.map((f) => f.seq ?? 0));
      if (top > peer.hubCursor) await peer.next((f) => f.seq === top);
      expect(peer.lastAck()).toBe(1);
      peer.close();
      await peer.closed;

      const again = await h.connect(c.token, sessionId);
      const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
      expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 1 });
      again.hubCursor = peer.hubCursor;
      unknownType(again);
      again.nextSeq = 3;
      await release();
      released = true;
      await again.ackedThrough(2, 10_000);
      // Committed after the replay: its answer is numbered after any answer the replay produced.
      const lastId = again.send('node.observed', { ...node(''), node_id: '' }); // seq 3
      await eventually(async () => again.frames.some((f) => f.type === 'error' && f.reply_to === lastId) || undefined, 10_000);
      // Distinct hub seqs: the hub re-sends, under their own seq, its frames the operator had not acknowledged.
      const answers = [...peer.frames, ...again.frames].filter((f) => f.type === 'error' && f.reply_to === unknownId);
      expect(answers[0]?.payload).toMatchObject({ code: 'invalid', retryable: false, unknown_type: 'future.thing' });
      expect(new Set(answers.map((f) => f.seq)).size).toBe(1);
      const view = await h.admin('GET', `/clusters/${c.name}`);
      expect(view.json.session.live.counters).toMatchObject({ unknownTypes: 1, framesIn: 3 });
      again.close();
    } finally {
      if (!released) await release();
    }
  });
});
