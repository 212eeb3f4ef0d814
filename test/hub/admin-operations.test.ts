import { describe, expect, it } from 'vitest';
import { eventually, insertTooLarge, sleep, useHub, type Frame, type Peer, type TestCluster } from './support/hub';

const h = useHub();

const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

async function start(c: TestCluster, body: Record<string, unknown> = {}): Promise<string> {
  const r = await h.admin('POST', `/clusters/${c.name}/operations`, {
    kind: 'node.drain',
    target: 'n-1',
    params: { grace_period_s: 30, evict_daemonsets: false },
    deadline_s: 300,
    ...body,
  });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  expect(r.json.operation_id).toMatch(ULID);
  return r.json.operation_id as string;
}

async function getOp(id: string): Promise<any> {
  const r = await h.admin('GET', `/operations/${id}`);
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return r.json;
}

/** The operation.start frame the hub sent for this operation. */
function startFrame(peer: Peer, operationId: string): Promise<Frame> {
  return peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === operationId);
}

/** Send operator frames and wait until the hub has applied them. */
async function reply(peer: Peer, send: (p: Peer) => void): Promise<void> {
  send(peer);
  await peer.ackedThrough(peer.nextSeq - 1);
}

describe('operations: POST → operation.start → accepted / progress / result → GET', () => {
  it('delivers the operation and shows every state transition with its history', async () => {
    const c = await h.newCluster('op');
    const { peer } = await h.openFresh(c);
    const before = Date.now();
    const id = await start(c, { deadline_s: 120 });

    const sf = await startFrame(peer, id);
    expect(sf.payload).toEqual({
      operation_id: id,
      kind: 'node.drain',
      target: 'n-1',
      params: { grace_period_s: 30, evict_daemonsets: false },
      deadline: expect.any(String),
    });
    const deadline = Date.parse(sf.payload.deadline as string);
    expect(deadline).toBeGreaterThanOrEqual(before + 119_000);
    expect(deadline).toBeLessThanOrEqual(Date.now() + 121_000);

    // The start frame is recorded before it is sent.
    const sent = await getOp(id);
    expect(sent).toMatchObject({
      operation_id: id,
      cluster_uid: c.uid,
      kind: 'node.drain',
      target: 'n-1',
      params: { grace_period_s: 30, evict_daemonsets: false },
      deadline: new Date(deadline).toISOString(),
      state: 'sent',
      outcome_message: null,
      accepted_at: null,
      concluded_at: null,
      history: [],
    });
    expect(Date.parse(sent.created_at)).toBeLessThanOrEqual(Date.parse(sent.sent_at));

    const acceptedId = peer.send('operation.accepted', { operation_id: id }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const accepted = await getOp(id);
    expect(accepted).toMatchObject({ state: 'accepted', concluded_at: null });
    expect(accepted.accepted_at).not.toBeNull();
    expect(accepted.history).toEqual([{ frame_id: acceptedId, kind: 'accepted', phase: null, message: '', at: expect.any(String), seq: 1 }]);

    let p1 = '';
    let p2 = '';
    await reply(peer, (p) => {
      p1 = p.send('operation.progress', { operation_id: id, phase: 'cordoning', message: 'cordoned' }, { reply_to: sf.id });
      p2 = p.send('operation.progress', { operation_id: id, phase: 'evicting', message: '3 of 5 pods evicted' }, { reply_to: sf.id });
    });
    const running = await getOp(id);
    expect(running.state).toBe('running');
    expect(running.accepted_at).toBe(accepted.accepted_at);
    expect(running.history.map((e: any) => [e.frame_id, e.kind, e.phase, e.message, e.seq])).toEqual([
      [acceptedId, 'accepted', null, '', 1],
      [p1, 'progress', 'cordoning', 'cordoned', 2],
      [p2, 'progress', 'evicting', '3 of 5 pods evicted', 3],
    ]);

    const resultId = peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'node drained' }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const done = await getOp(id);
    expect(done).toMatchObject({ state: 'succeeded', outcome_message: 'node drained' });
    expect(done.concluded_at).not.toBeNull();
    expect(done.history.at(-1)).toMatchObject({ frame_id: resultId, kind: 'result', phase: 'succeeded', message: 'node drained', seq: 4 });
    const times = done.history.map((e: any) => Date.parse(e.at));
    expect(times).toEqual([...times].sort((a, b) => a - b));

    // A redelivery of the same result (same frame id, e.g. after a lossy resume) changes nothing at all.
    peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'node drained' }, { reply_to: sf.id, id: resultId });
    // A second, different result changes nothing either: the first one concluded the operation.
    peer.send('operation.result', { operation_id: id, outcome: 'failed', message: 'late failure' }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const after = await getOp(id);
    expect(after).toMatchObject({
      state: 'succeeded',
      outcome_message: 'node drained',
      concluded_at: done.concluded_at,
      accepted_at: done.accepted_at,
      sent_at: done.sent_at,
    });
    expect(after.history.filter((e: any) => e.frame_id === resultId)).toHaveLength(1);

    // The cluster's list shows the same operation.
    const list = await h.admin('GET', `/clusters/${c.uid}/operations`);
    expect(list.json.items).toHaveLength(1);
    const { history: _h, history_omitted: _o, history_omitted_at_least: _a, ...summary } = after;
    expect(list.json.items[0]).toEqual(summary);
    peer.close();
  });

  it('an operation with a 1-second deadline and no result shows deadline_exceeded', async () => {
    const c = await h.newCluster('dl');
    const { peer } = await h.openFresh(c);
    const id = await start(c, { kind: 'model.prefetch', target: 'llama-70b', params: {}, deadline_s: 1 });
    const sf = await startFrame(peer, id);
    await reply(peer, (p) => p.send('operation.accepted', { operation_id: id }, { reply_to: sf.id }));
    expect((await getOp(id)).state).toBe('accepted');
    await sleep(1_200);
    const op = await getOp(id);
    expect(op).toMatchObject({ state: 'deadline_exceeded', concluded_at: null, outcome_message: null });
    expect(Date.parse(op.deadline)).toBeLessThan(Date.now());
    expect((await h.admin('GET', `/clusters/${c.name}/operations`)).json.items[0].state).toBe('deadline_exceeded');
    // Shown, not stored: the stored state is still what the operator last reported.
    expect(await h.sql('select state from operations where operation_id = $1', [id])).toEqual([{ state: 'accepted' }]);
    peer.close();
  });

  it('an operation nobody could deliver also shows deadline_exceeded, from pending', async () => {
    const c = await h.newCluster('dl0');
    const id = await start(c, { deadline_s: 1 });
    expect((await getOp(id)).state).toBe('pending');
    await sleep(1_200);
    expect(await getOp(id)).toMatchObject({ state: 'deadline_exceeded', sent_at: null });
  });

  it('an error frame replying to the operation.start concludes it as failed', async () => {
    const c = await h.newCluster('err');
    const { peer } = await h.openFresh(c);
    const id = await start(c, { kind: 'replica.restart', target: 'd-1-abc', params: {} });
    const sf = await startFrame(peer, id);
    const errId = peer.send('error', { code: 'deadline', message: 'cannot drain before the deadline', retryable: false }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const op = await getOp(id);
    expect(op.state).toBe('failed');
    expect(op.concluded_at).not.toBeNull();
    expect(op.outcome_message).toContain('cannot drain before the deadline');
    expect(op.history).toEqual([
      { frame_id: errId, kind: 'error', phase: 'deadline', message: 'cannot drain before the deadline', at: expect.any(String), seq: 1 },
    ]);
    // A result after the error changes nothing.
    await reply(peer, (p) => p.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'done after all' }, { reply_to: sf.id }));
    expect(await getOp(id)).toMatchObject({ state: 'failed', concluded_at: op.concluded_at, outcome_message: op.outcome_message });
    peer.close();
  });

  it('an operation.start is not sent until its frame id is recorded; a failure to record it is retried, then an error reply still concludes it', async () => {
    const c = await h.newCluster('mark');
    const { peer } = await h.openFresh(c);
    // The start's retry can come later than the 3 s silence limit on a loaded machine: the operator pings.
    const pinger = setInterval(() => peer.isClosed || peer.send('ping', {}, { ack: peer.hubCursor }), 500);
    // Recording the start frame fails (transiently) for this cluster only.
    const fn = `wingsmith_test_fail_mark_${c.uid.toLowerCase()}`;
    await h.sql(`create function ${fn}() returns trigger language plpgsql as $$
      begin raise exception 'test: cannot record the start frame' using errcode = '40001'; end $$`);
    await h.sql(`create trigger ${fn} before update of start_frame_ids on operations for each row
      when (new.cluster_uid = '${c.uid}') execute function ${fn}()`);
    let id: string;
    try {
      id = await start(c);
      await sleep(1_500);
      expect(peer.frames.some((f) => f.type === 'operation.start')).toBe(false);
      expect((await getOp(id)).state).toBe('pending');
    } finally {
      await h.sql(`drop trigger ${fn} on operations`);
      await h.sql(`drop function ${fn}()`);
    }
    const sf = await startFrame(peer, id);
    peer.send('error', { code: 'invalid', message: 'no such node here', retryable: false }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await getOp(id)).toMatchObject({ state: 'failed', outcome_message: expect.stringContaining('no such node here') });
    clearInterval(pinger);
    peer.close();
  });

  it('an operation started while no session is connected is delivered when one opens: pending → sent', async () => {
    const c = await h.newCluster('late');
    const id = await start(c);
    expect(await getOp(id)).toMatchObject({ state: 'pending', sent_at: null });
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const sf = await startFrame(peer, id);
    expect(sf.payload.operation_id).toBe(id);
    const op = await eventually(async () => {
      const o = await getOp(id);
      return o.state === 'sent' ? o : undefined;
    });
    expect(op.sent_at).not.toBeNull();
    peer.close();
  });

  it('a fresh session whose resync ends incomplete delivers an open operation once, not again with the changes after it', async () => {
    const c = await h.newCluster('inc');
    const id = await start(c);
    // A deployment too large to send (written by another writer): the resync ends complete: false
    // and the changes are sent again from before it, so that withdrawals still reach the operator.
    await insertTooLarge(h, c.uid);
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end');
    const sf = await startFrame(peer, id);
    // The changes come in revision order: the too-large deployment's error in its place is after
    // the operation, so a second start would be here by the time it comes.
    await peer.next((f) => f.type === 'error' && f.reply_to === null);
    expect(peer.frames.filter((f) => f.type === 'operation.start').map((f) => f.id)).toEqual([sf.id]);
    const [row] = await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [id]);
    expect(row?.ids).toEqual([sf.id]);
    peer.close();
  });
});

describe('GET /admin/clusters/{id}/operations', () => {
  it('lists operations newest first; the cursor walks each exactly once', async () => {
    const c = await h.newCluster('ops');
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push(await start(c, { target: `n-${i}` }));
    const other = await h.newCluster('ops-other');
    await start(other);

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await h.admin('GET', `/clusters/${c.name}/operations?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status).toBe(200);
      seen.push(...r.json.items.map((o: any) => o.operation_id));
      cursor = r.json.next_cursor;
      pages++;
    } while (cursor !== null);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());

    const all = await h.admin('GET', `/clusters/${c.uid}/operations`);
    expect(all.json.items.map((o: any) => o.target)).toEqual(['n-6', 'n-5', 'n-4', 'n-3', 'n-2', 'n-1', 'n-0']);
    expect(all.json.items[0]).not.toHaveProperty('history');
  });
});

describe('operation errors', () => {
  it('an unknown operation is 404; a malformed id is 400 naming the field', async () => {
    expect(await h.admin('GET', '/operations/01J9X2C8W1F4TQ3R7MZK5N2B9D')).toMatchObject({
      status: 404,
      json: { error: { code: 'not_found' } },
    });
    expect(await h.admin('GET', '/operations/not-a-ulid')).toMatchObject({
      status: 400,
      json: { error: { code: 'invalid', field: 'operation_id' } },
    });
  });

  it('starting an operation on an unknown cluster is 404; a bad body is 400 naming the field', async () => {
    const body = { kind: 'node.drain', target: 'n', deadline_s: 10 };
    expect(await h.admin('POST', '/clusters/no-such-cluster/operations', body)).toMatchObject({ status: 404, json: { error: { code: 'not_found' } } });
    const c = await h.newCluster('opbad');
    expect(await h.admin('POST', `/clusters/${c.name}/operations`, { ...body, kind: 'node.reboot' })).toMatchObject({
      status: 400,
      json: { error: { code: 'invalid', field: 'kind' } },
    });
    for (const deadline_s of [0, 0.5, 1e-300]) {
      // Under a second the deadline would pass before the start frame could reach the operator.
      expect(await h.admin('POST', `/clusters/${c.name}/operations`, { ...body, deadline_s }), String(deadline_s)).toMatchObject({
        status: 400,
        json: { error: { field: 'deadline_s' } },
      });
    }
  });
});
