/**
 * A deploy over a fresh session part way through its redelivery of open operations. A hub from
 * before HubResync.opsAfter was stored (61448bf, fcb8663: 2026-12-02..04) recorded that stage as
 * `stage: 'ops'` with no progress: the new code read it as "none delivered yet" and sent every
 * operation the old one had already written again, under new frame ids, each taking a slot of the
 * operation's remembered start frames (START_FRAMES_KEPT). Seen with the old tree in real workerd
 * (a window of 20, 30 open operations: 18 sent twice). The operator still has those starts
 * (replayed or acknowledged), so only the ones not written go.
 *
 * The old layout is built here from a session of this hub: its record rewritten as the old hub
 * left it after writing the resync's begin, its end and the first start (the same fields, without
 * opsAfter and opsRedeliveredThrough; no owed table, which came later), and the object evicted.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { admin, connect, desired, hubEnv, newCluster, sql, type Frame, type Peer } from './support/peer';

async function startOperation(cluster: string, target: string): Promise<string> {
  const r = await admin('POST', `/clusters/${cluster}/operations`, { kind: 'node.cordon', target, params: {}, deadline_s: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  return r.json.operation_id as string;
}

const starts = (p: Peer) => p.frames.filter((f) => f.type === 'operation.start').map((f) => f.payload.operation_id as string);

describe('a session record of an older hub part way through redelivering open operations', () => {
  it('goes on after the last start it wrote (still in its replay buffer), not from the first again', async () => {
    const c = await newCluster('ops-legacy');
    const ops = [await startOperation(c.name, 'n-1'), await startOperation(c.name, 'n-2'), await startOperation(c.name, 'n-3')];

    const a = await connect(c.token);
    const sessionId = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    const begin: Frame = await a.next((f) => f.type === 'resync.begin');
    await a.next((f) => f.type === 'operation.start' && f.payload.operation_id === ops[2]);
    expect(starts(a)).toEqual(ops);
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(sessionId) as string });

    // What the older hub had stored when it stopped: seqs 1..3 written (begin, stream.end, the
    // first start), none acknowledged, the resync in its 'ops' stage with no progress recorded.
    await runInDurableObject(stub, async (_i, state) => {
      const raw = state.storage.sql;
      const meta = JSON.parse(raw.exec<{ doc: string }>('select doc from meta where k = 1').one().doc) as Record<string, unknown>;
      const out = meta.out as { nextSeq: number; peerAck: number; lostThrough: number };
      const old: Record<string, unknown> = {
        ...meta,
        out: { ...out, nextSeq: 4, peerAck: 0 },
        desiredWatermark: 0,
        hubResync: { beginId: begin.id, revision: 3, after: null, count: 0, stage: 'ops' },
        counters: { ...(meta.counters as object), framesOut: 3 },
      };
      for (const k of ['opsRedeliveredThrough', 'ackWaitSince', 'windowWait', 'pollJoinOwed', 'countedAhead']) delete old[k];
      raw.exec('update meta set doc = ? where k = 1', JSON.stringify(old));
      raw.exec('delete from replay where seq > 3');
      raw.exec('drop table if exists owed');
      await state.storage.sync();
      state.abort('deploy (test)');
    }).catch(() => undefined);
    await a.closed;

    // The operator processed everything it got (through seq 3) and resumes on the new code.
    const b = await connect(c.token, sessionId);
    b.hubCursor = 3;
    const w = await b.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 3 });
    expect(w.payload.full_resync).toBe(false);
    await b.next((f) => f.type === 'operation.start' && f.payload.operation_id === ops[2]);
    // A desired change after the resync: everything before it is all the resync still sent.
    await admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    await b.next((f) => f.type === 'deployment.desired');
    expect(starts(b)).toEqual([ops[1], ops[2]]);
    const seqs = b.frames.flatMap((f) => (f.seq === null ? [] : [f.seq]));
    expect(seqs[0]).toBe(4);
    expect(seqs).toEqual([...new Set(seqs)]);
    const rows = await sql<{ n: number }>('select cardinality(start_frame_ids) as n from operations where operation_id = $1', [ops[0]]);
    expect(rows[0]?.n).toBe(1);
    expect(b.invalid).toEqual([]);
    b.close();
  });
});
