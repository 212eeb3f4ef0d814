/**
 * Admin writes of desired state and operations that answered 2xx reach the connected operator
 * under races (concurrent PUT/DELETE/bulk/operations, a fresh session's resync streaming in small
 * pages, a resume): changes in revision order, every acknowledged write reached (itself or a later
 * revision of its deployment: delivery is of state, so a revision a later write replaced before it
 * was read is not sent), a revision sent twice (at-least-once: one read by the snapshot and again as
 * a change) the same both times, and the operator ends on what Postgres (and GET …/deployments) holds.
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, sleep, useHub, type Frame, type Peer } from './support/hub';

const h = useHub({ ...FAST_TIMERS, DESIRED_PAGE_ROWS: '3', CLAIM_SNAPSHOT_ROWS: '2' });

/** Frames of all connections of one session, in seq order, each seq once (a resume replays). */
function stream(peers: Peer[]): Frame[] {
  const bySeq = new Map<number, Frame>();
  for (const p of peers) for (const f of p.frames) if (typeof f.seq === 'number' && !bySeq.has(f.seq)) bySeq.set(f.seq, f);
  return [...bySeq.values()].sort((a, b) => (a.seq as number) - (b.seq as number));
}

/** What an operator following the protocol would hold after applying `frames`. */
function operatorView(frames: Frame[]) {
  const state = new Map<string, Record<string, any>>();
  let snap: { begin: string; ids: Set<string> } | null = null;
  for (const f of frames) {
    if (f.type === 'resync.begin') snap = { begin: f.id as string, ids: new Set() };
    else if (f.type === 'stream.end' && snap && f.reply_to === snap.begin) {
      if (f.payload.complete) for (const id of [...state.keys()]) if (!snap.ids.has(id)) state.delete(id);
      snap = null;
    } else if (f.type === 'deployment.desired') {
      const p = f.payload as Record<string, any>;
      if (snap && f.reply_to === snap.begin) snap.ids.add(p.deployment_id);
      if (p.deleted) state.delete(p.deployment_id);
      else state.set(p.deployment_id, p);
    }
  }
  return state;
}

async function dbState(uid: string) {
  const rows = await h.sql<{ deployment_id: string; revision: string; max_replicas: number; deleted: boolean }>(
    'select deployment_id, revision, max_replicas, deleted from desired_deployments where cluster_uid = $1',
    [uid],
  );
  return rows;
}

async function clusterRevision(uid: string): Promise<number> {
  const [r] = await h.sql<{ rev: string }>('select desired_revision::text as rev from clusters where uid = $1', [uid]);
  return Number(r?.rev);
}

/**
 * Pings every second, as an operator does at the advertised PING_INTERVAL_MS (1 s here): the tests
 * keep their operator otherwise silent, and on a loaded machine their admin writes can outlast the
 * silence limit (IDLE_TIMEOUT_MS, 3 s), which then cuts the connection (4408) mid-test.
 */
function pinging(peer: () => Peer): () => void {
  const t = setInterval(() => {
    const p = peer();
    if (!p.isClosed) p.send('ping', {});
  }, 1_000);
  return () => clearInterval(t);
}

/** Wait until the operator's stream has a desired frame at or above `rev`, or an operation start for every id. */
async function settle(peers: Peer[], pred: (frames: Frame[]) => boolean, ms = 15_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (pred(stream(peers))) break;
    await sleep(100);
  }
  await sleep(800);
}

function checkAgainstDb(frames: Frame[], rows: Awaited<ReturnType<typeof dbState>>, acked: { id: string; revision: number }[]) {
  const view = operatorView(frames);
  const live = rows.filter((r) => !r.deleted);
  // 1. the operator ends on what Postgres holds
  expect.soft([...view.keys()].sort(), 'operator deployments vs Postgres').toEqual(live.map((r) => r.deployment_id).sort());
  for (const r of live) {
    expect.soft(view.get(r.deployment_id), r.deployment_id).toMatchObject({ revision: Number(r.revision), max_replicas: r.max_replicas });
  }
  // 2. changes (outside a resync stream) in increasing revision order
  const changes = frames.filter((f) => f.type === 'deployment.desired' && f.reply_to === null).map((f) => f.payload.revision as number);
  expect.soft(changes, 'change revisions in increasing order').toEqual([...changes].sort((a, b) => a - b));
  // 3. a revision sent more than once (the spec's at-least-once) says the same each time
  const byKey = new Map<string, string>();
  const differing: string[] = [];
  for (const f of frames) {
    if (f.type !== 'deployment.desired') continue;
    const key = `${f.payload.deployment_id}@${f.payload.revision}`;
    const body = JSON.stringify(f.payload);
    if (byKey.has(key) && byKey.get(key) !== body) differing.push(key);
    byKey.set(key, body);
  }
  expect.soft(differing, 'revisions sent twice with different content').toEqual([]);
  // 4. every acknowledged write reached the operator (itself or a later revision of that deployment)
  const seen = new Map<string, number>();
  for (const f of frames) if (f.type === 'deployment.desired') seen.set(f.payload.deployment_id as string, Math.max(seen.get(f.payload.deployment_id as string) ?? 0, f.payload.revision as number));
  const lost = acked.filter((a) => (seen.get(a.id) ?? 0) < a.revision);
  expect.soft(lost, 'acknowledged writes that never reached the operator').toEqual([]);
}

describe('review: desired writes under races reach the operator', () => {
  it('concurrent single PUTs, DELETEs, bulk PUTs and operations of one cluster (by uid and by name)', async () => {
    const c = await h.newCluster('rr');
    const { peer } = await h.openFresh(c);
    const stopPinging = pinging(() => peer);
    const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
    const acked: { id: string; revision: number }[] = [];
    const ops: string[] = [];
    const reqs: Promise<void>[] = [];
    for (let round = 0; round < 6; round++) {
      for (const [i, id] of ids.entries()) {
        const ref = i % 2 ? c.uid : c.name;
        reqs.push(
          h.admin('PUT', `/clusters/${ref}/deployments/${id}`, desired({ max_replicas: 10 + round })).then((r) => {
            if (r.status === 200) acked.push({ id, revision: r.json.revision });
          }),
        );
        if ((i + round) % 3 === 0) {
          reqs.push(
            h.admin('DELETE', `/clusters/${ref}/deployments/${id}`).then((r) => {
              if (r.status === 200) acked.push({ id, revision: r.json.revision });
            }),
          );
        }
      }
      reqs.push(
        h.admin('PUT', `/clusters/${round % 2 ? c.uid : c.name}/deployments`, { deployments: ids.slice(0, 3).map((id) => ({ deployment_id: id, ...desired({ max_replicas: 100 + round }) })) }).then((r) => {
          if (r.status === 200) for (const it of r.json.items) acked.push({ id: it.deployment_id, revision: it.revision });
        }),
      );
      reqs.push(
        h.admin('POST', `/clusters/${round % 2 ? c.uid : c.name}/operations`, { kind: 'node.cordon', target: `n${round}`, params: {}, deadline_s: 300 }).then((r) => {
          if (r.status === 202) ops.push(r.json.operation_id);
        }),
      );
    }
    await Promise.all(reqs);
    const top = await clusterRevision(c.uid);
    await settle([peer], (fs) => {
      const starts = new Set(fs.filter((f) => f.type === 'operation.start').map((f) => f.payload.operation_id));
      const maxRev = Math.max(0, ...fs.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.revision as number));
      return ops.every((o) => starts.has(o)) && maxRev >= top - ops.length;
    });
    const frames = stream([peer]);
    checkAgainstDb(frames, await dbState(c.uid), acked);
    const starts = frames.filter((f) => f.type === 'operation.start').map((f) => f.payload.operation_id as string);
    expect.soft(starts.sort(), 'every accepted operation started exactly once').toEqual([...ops].sort());
    stopPinging();
    expect(peer.closeInfo, 'the operator stayed connected').toBeNull();
    peer.close();
  }, 60_000);

  it('PUTs and a DELETE while a fresh session resync streams in small pages', async () => {
    const c = await h.newCluster('rs');
    const many = Array.from({ length: 40 }, (_, i) => ({ deployment_id: `d${String(i).padStart(3, '0')}`, ...desired() }));
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: many })).status).toBe(200);
    const peer = await h.connect(c.token);
    peer.send('hello', { operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false, cluster_id: c.name });
    await peer.next((f) => f.type === 'welcome');
    const stopPinging = pinging(() => peer);
    const acked: { id: string; revision: number }[] = [];
    const reqs: Promise<void>[] = [];
    for (const id of ['d039', 'd038', 'd030', 'd000', 'd001', 'zz-new']) {
      reqs.push(
        h.admin('PUT', `/clusters/${c.uid}/deployments/${id}`, desired({ max_replicas: 7 })).then((r) => {
          if (r.status === 200) acked.push({ id, revision: r.json.revision });
        }),
      );
    }
    reqs.push(
      h.admin('DELETE', `/clusters/${c.uid}/deployments/d035`).then((r) => {
        if (r.status === 200) acked.push({ id: 'd035', revision: r.json.revision });
      }),
    );
    await Promise.all(reqs);
    const top = await clusterRevision(c.uid);
    await settle([peer], (fs) => Math.max(0, ...fs.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.revision as number)) >= top && fs.some((f) => f.type === 'stream.end'));
    const frames = stream([peer]);
    expect(frames.find((f) => f.type === 'stream.end')?.payload).toMatchObject({ complete: true });
    checkAgainstDb(frames, await dbState(c.uid), acked);
    stopPinging();
    expect(peer.closeInfo, 'the operator stayed connected').toBeNull();
    peer.close();
  }, 60_000);

  it('PUTs while the operator drops and resumes its session twice', async () => {
    const c = await h.newCluster('rm');
    const first = await h.openFresh(c);
    const peers: Peer[] = [first.peer];
    const acked: { id: string; revision: number }[] = [];
    let stop = false;
    const writer = (async () => {
      for (let i = 0; !stop && i < 200; i++) {
        const id = `w${i % 5}`;
        const r = i % 7 === 6 ? await h.admin('DELETE', `/clusters/${c.uid}/deployments/${id}`) : await h.admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired({ max_replicas: 10 + i }));
        if (r.status === 200) acked.push({ id, revision: r.json.revision });
        await sleep(10);
      }
    })();
    let cur = first.peer;
    const stopPinging = pinging(() => cur);
    for (let k = 0; k < 2; k++) {
      await sleep(400);
      // read everything so far (advances hubCursor)
      await cur.next(() => false, 50).catch(() => null);
      cur.close();
      await cur.closed;
      await sleep(100);
      const again = await h.connect(c.token, first.sessionId);
      again.hubCursor = cur.hubCursor;
      again.nextSeq = cur.nextSeq;
      const welcome = await again.hello({ cluster_id: c.name, session_id: first.sessionId, resume_from: cur.hubCursor });
      expect(welcome.payload).toMatchObject({ session_id: first.sessionId, full_resync: false });
      peers.push(again);
      cur = again;
    }
    stop = true;
    await writer;
    const top = await clusterRevision(c.uid);
    await settle(peers, (fs) => Math.max(0, ...fs.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.revision as number)) >= top);
    const frames = stream(peers);
    // the seqs the operator got form one contiguous stream
    const seqs = frames.map((f) => f.seq as number);
    expect.soft(seqs, 'hub stream contiguous').toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    checkAgainstDb(frames, await dbState(c.uid), acked);
    stopPinging();
    expect(cur.closeInfo, 'the operator stayed connected').toBeNull();
    cur.close();
  }, 60_000);

  it('concurrent POSTs with one Idempotency-Key start one operation, sent once', async () => {
    const c = await h.newCluster('ri');
    const { peer } = await h.openFresh(c);
    const body = JSON.stringify({ kind: 'node.drain', target: 'n1', params: { grace_period_s: 30 }, deadline_s: 300 });
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        fetch(`${h.hub.url}/admin/clusters/${i % 2 ? c.uid : c.name}/operations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json', 'idempotency-key': 'same-key-1' },
          body,
        }).then(async (r) => {
          const text = await r.text();
          return { status: r.status, text, json: (r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : null) as any };
        }),
      ),
    );
    expect(results.map((r) => r.status), results.map((r) => r.text).join('\n')).toEqual(Array(10).fill(202));
    const ids = new Set(results.map((r) => r.json.operation_id));
    expect(ids.size).toBe(1);
    const [id] = [...ids];
    await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id, 5_000);
    await sleep(800);
    expect(peer.frames.filter((f) => f.type === 'operation.start').length).toBe(1);
    expect((await h.sql('select 1 from operations where cluster_uid = $1', [c.uid])).length).toBe(1);
    peer.close();
  }, 30_000);

  it('a retry with the same Idempotency-Key and the same params (numbers written differently) is a replay, not 422', async () => {
    const c = await h.newCluster('rk');
    const post = (body: string) =>
      fetch(`${h.hub.url}/admin/clusters/${c.uid}/operations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json', 'idempotency-key': 'k-num' },
        body,
      }).then(async (r) => ({ status: r.status, json: await r.json() as any, replayed: r.headers.get('idempotent-replayed') }));
    const a = await post('{"kind":"node.drain","target":"n1","params":{"g":1e20,"h":0.1,"s":"x"},"deadline_s":60}');
    expect(a.status).toBe(202);
    const b = await post('{"kind":"node.drain","target":"n1","params":{"s":"x","h":0.1,"g":100000000000000000000},"deadline_s":90}');
    expect(b.status, JSON.stringify(b.json)).toBe(202);
    expect(b.json.operation_id).toBe(a.json.operation_id);
    expect(b.replayed).toBe('true');
  }, 30_000);

  it('GET …/deployments agrees with what the operator received after a burst', async () => {
    const c = await h.newCluster('rg');
    const { peer } = await h.openFresh(c);
    await Promise.all([
      h.admin('PUT', `/clusters/${c.uid}/deployments`, { deployments: ['x1', 'x2', 'x3'].map((id) => ({ deployment_id: id, ...desired({ max_replicas: 5 }) })) }),
      h.admin('PUT', `/clusters/${c.name}/deployments/x2`, desired({ max_replicas: 9 })),
      h.admin('DELETE', `/clusters/${c.uid}/deployments/x3`),
      h.admin('PUT', `/clusters/${c.uid}/deployments/x4`, desired({ max_replicas: 4 })),
    ]);
    const top = await clusterRevision(c.uid);
    await settle([peer], (fs) => Math.max(0, ...fs.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.revision as number)) >= top);
    const view = operatorView(stream([peer]));
    const g = await h.admin('GET', `/clusters/${c.uid}/deployments?limit=100`);
    expect(g.status).toBe(200);
    const items = (g.json.items ?? g.json.deployments) as any[];
    const listed = items.filter((d) => d.desired && !d.desired.deleted).map((d) => ({ id: d.deployment_id, rev: d.desired.revision, max: d.desired.max_replicas }));
    const got = [...view.values()].map((p) => ({ id: p.deployment_id, rev: p.revision, max: p.max_replicas }));
    expect(got.sort((a, b) => a.id.localeCompare(b.id)), JSON.stringify(items[0]).slice(0, 400)).toEqual(listed.sort((a, b) => a.id.localeCompare(b.id)));
    peer.close();
  }, 30_000);
});
