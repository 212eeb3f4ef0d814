import { describe, expect, it, onTestFinished } from 'vitest';
import { desired, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
const h = useHub();

/** Schema-valid serving whose env values are `count` strings of 4096 `ch` (a control character escapes to 6 bytes, a quote to 2). */
function servingOf(ch: string, count = 128) {
  const env: Record<string, string> = {};
  for (let i = 0; i < count; i++) env[`E${i}`] = ch.repeat(4096);
  return { ...desired().serving, env };
}

describe('desired state out (spec: Demand hub → operator)', () => {
  it('a PUT reaches the owning session as deployment.desired with exactly the stored numbers and the serving configuration inline', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const body = desired({
      workload_id: 'llama-70b',
      min_replicas: 3,
      max_replicas: 7,
      serving: { engine: 'vllm', model: 'meta-llama/Llama-3.1-70B', image: 'vllm:0.6', args: ['--tp', '4'], env: { A: '1' }, gpus_per_replica: 4, gpu_model: 'A100', port: 8000 },
    });
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/llama`, body);
    expect(put.status).toBe(200);
    const f = await peer.next((x) => x.type === 'deployment.desired');
    expect(f.payload).toEqual({ deployment_id: 'llama', revision: put.json.revision, deleted: false, ...body });
    expect(f.reply_to).toBeNull();
    peer.close();
  });

  it('each change carries a higher revision; a withdrawal is sent as deleted: true with serving null', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ min_replicas: 1 }));
    const first = await peer.next((x) => x.type === 'deployment.desired');
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ min_replicas: 2 }));
    const second = await peer.next((x) => x.type === 'deployment.desired');
    expect(second.payload.revision as number).toBeGreaterThan(first.payload.revision as number);
    const del = await h.admin('DELETE', `/clusters/${c.name}/deployments/d1`);
    expect(del.json).toMatchObject({ deleted: true });
    const third = await peer.next((x) => x.type === 'deployment.desired');
    expect(third.payload).toMatchObject({ deployment_id: 'd1', deleted: true, serving: null });
    expect(third.payload.revision as number).toBeGreaterThan(second.payload.revision as number);
    peer.close();
  });

  it('each change is sent exactly once, in revision order, whether it arrives by poke or by poll', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    for (let i = 1; i <= 6; i++) {
      await h.admin('PUT', `/clusters/${c.name}/deployments/d${i % 2}`, desired({ min_replicas: i, max_replicas: i }));
      if (i % 3 === 0) await new Promise((r) => setTimeout(r, 400)); // let a poll run in between
    }
    const revisions: number[] = [];
    while (revisions.length < 6) revisions.push((await peer.next((f) => f.type === 'deployment.desired')).payload.revision as number);
    await new Promise((r) => setTimeout(r, 700));
    const all = peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.revision as number);
    expect(all).toEqual([...revisions].sort((a, b) => a - b));
    expect(new Set(all).size).toBe(6);
    peer.close();
  });

  it('changes written by another plane component (no poke) are picked up on the ownership poll', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await h.sql(
      `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
       insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving)
       select uid, 'from-elsewhere', 'w', desired_revision, 1, 1, $2::jsonb from rev`,
      [c.uid, JSON.stringify(desired().serving)],
    );
    const f = await peer.next((x) => x.type === 'deployment.desired', 5_000);
    expect(f.payload).toMatchObject({ deployment_id: 'from-elsewhere', min_replicas: 1, max_replicas: 1 });
    peer.close();
  });

  it('a PUT with min above max is refused with 400 naming the field; an unknown cluster is 404', async () => {
    const c = await h.newCluster();
    const bad = await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ min_replicas: 5, max_replicas: 2 }));
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'invalid', field: 'min_replicas' });
    const missing = await h.admin('PUT', `/clusters/no-such-cluster/deployments/d1`, desired());
    expect(missing.status).toBe(404);
    expect(missing.json.error.code).toBe('not_found');
  });

  it('one revision has the same bytes whichever path sends it: the live frame of a single or bulk PUT, and the resync read back from Postgres', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // Keys in an order Postgres does not keep (jsonb: shorter first, then by bytes).
    const serving = { port: 8000, env: { ZETA_LONGER: '1', ALPHA: '2', B: '3', AA: '4' }, model: 'm', args: ['--x'], image: 'img', engine: 'vllm', gpu_model: null, gpus_per_replica: 1 };
    expect((await h.admin('PUT', `/clusters/${c.uid}/deployments/single`, desired({ serving }))).status).toBe(200);
    const bulk = { deployments: [{ deployment_id: 'bulk-a', ...desired({ serving }) }, { deployment_id: 'bulk-b', ...desired({ serving: { ...serving, env: { Q: 'x', QQQ: 'y', QQ: 'z' } } }) }] };
    expect((await h.admin('PUT', `/clusters/${c.uid}/deployments`, bulk)).status).toBe(200);
    const live = [];
    for (let i = 0; i < 3; i++) live.push(await peer.next((f) => f.type === 'deployment.desired'));
    peer.close();
    const again = await h.connect(c.token);
    await again.hello({ cluster_id: c.name, lossy: true });
    const byId = new Map<string, string>();
    for (let i = 0; i < 3; i++) {
      const f = await again.next((x) => x.type === 'deployment.desired');
      byId.set(f.payload['deployment_id'] as string, JSON.stringify(f.payload));
    }
    expect(live.map((f) => JSON.stringify(f.payload))).toEqual(live.map((f) => byId.get(f.payload['deployment_id'] as string)));
    again.close();
  });

  it('desired state written while no operator is connected arrives in the next session\'s resync', async () => {
    const c = await h.newCluster();
    await h.admin('PUT', `/clusters/${c.name}/deployments/early`, desired());
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const f = await peer.next((x) => x.type === 'deployment.desired');
    expect(f.payload.deployment_id).toBe('early');
    peer.close();
  });
});

describe('operations out (spec: Operations)', () => {
  it('an operation is sent as operation.start with its deadline, and redelivered to a fresh session until concluded', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const post = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n1', params: { grace_period_s: 30 }, deadline_s: 600 });
    expect(post.status).toBe(202);
    const start = await peer.next((x) => x.type === 'operation.start');
    expect(start.payload).toMatchObject({ operation_id: post.json.operation_id, kind: 'node.drain', target: 'n1', params: { grace_period_s: 30 } });
    expect(Date.parse(start.payload.deadline as string)).toBeGreaterThan(Date.now() + 500_000);
    peer.close();
    await peer.closed;
    // A fresh session does not replay old frames; the unconcluded operation is delivered again.
    const again = await h.connect(c.token);
    await again.hello({ cluster_id: c.name, lossy: true });
    const redelivered = await again.next((x) => x.type === 'operation.start');
    // The whole payload again, exactly as first sent (the redelivery path reads it from Postgres).
    expect(redelivered.payload).toEqual(start.payload);
    again.send('operation.result', { operation_id: post.json.operation_id, outcome: 'succeeded', message: 'drained' }, { reply_to: redelivered.id });
    await again.ackedThrough(1);
    again.close();
    await again.closed;
    // Concluded: a later fresh session does not get it.
    const third = await h.connect(c.token);
    await third.hello({ cluster_id: c.name, lossy: true });
    await third.next((x) => x.type === 'stream.end');
    await new Promise((r) => setTimeout(r, 300));
    expect(third.frames.some((f) => f.type === 'operation.start')).toBe(false);
    third.close();
  });

  it("the operator's refusal of a deployment.desired is recorded even when the hub has sent more than 30,000 deployment.desired frames since it (a large resync inside the replay window)", async () => {
    const c = await h.newCluster();
    // More than half as many again as the 20,000 the session kept for resolving refusals (it
    // trimmed at 30,000), all inside the replay window (REPLAY_BUFFER_FRAMES, 50,000): the hub
    // sends them all before the operator has acknowledged, or refused, the first.
    const n = 31_000;
    for (let i = 0; i < n; i += 1_000) {
      const deployments = Array.from({ length: 1_000 }, (_, j) => ({ deployment_id: `d${String(i + j).padStart(5, '0')}`, ...desired() }));
      expect((await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments })).status).toBe(200);
    }
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    // An operator still rendering the first frame pings, acknowledging nothing yet.
    const pings = setInterval(() => peer.send('ping', {}, { ack: null }), 500);
    try {
      const first = await peer.next((x) => x.type === 'deployment.desired', 30_000);
      await peer.next((x) => x.type === 'stream.end', 60_000);
      // What a real operator does with the frame it can never render: ack it and answer with an error.
      peer.send('error', { code: 'invalid', message: 'no GPU model A100 on this cluster', retryable: false }, { reply_to: first.id, ack: first.seq });
      await peer.ackedThrough(peer.nextSeq - 1);
      const rows = await h.sql<{ code: string | null }>("select last_refusal->>'code' as code from desired_deployments where cluster_uid = $1 and deployment_id = $2", [
        c.uid,
        (first.payload as { deployment_id: string }).deployment_id,
      ]);
      expect(rows).toEqual([{ code: 'invalid' }]);
    } finally {
      clearInterval(pings);
      peer.close();
    }
  }, 120_000);

  it("the operator's refusal of a deployment.desired is recorded on the deployment and counted in the cluster view", async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/big`, desired({ min_replicas: 64, max_replicas: 64 }));
    const f = await peer.next((x) => x.type === 'deployment.desired');
    // What a real operator does with a frame it can never render: ack it and answer with an error.
    peer.send('error', { code: 'invalid', message: 'no GPU model A100 on this cluster', retryable: false }, { reply_to: f.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const list = await h.admin('GET', `/clusters/${c.name}/deployments`);
    expect(list.json.items).toEqual([
      expect.objectContaining({
        deployment_id: 'big',
        refusals: 1,
        last_refusal: {
          at: expect.any(String),
          revision: put.json.revision,
          code: 'invalid',
          message: 'no GPU model A100 on this cluster',
          seq: peer.nextSeq - 1,
          session_id: expect.any(String),
        },
      }),
    ]);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.desired_refusals).toBe(1);
    expect(view.json.session.live.counters.desiredRefusals).toBe(1);
    peer.close();
  });

  it('a bulk PUT stores many deployments in one request, each with its own revision in order, and they reach the operator together', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const deployments = Array.from({ length: 300 }, (_, i) => ({ deployment_id: `bulk-${String(i).padStart(3, '0')}`, ...desired({ min_replicas: i % 3 }) }));
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments });
    expect(put.status).toBe(200);
    const revisions = (put.json.items as { deployment_id: string; revision: number }[]).map((x) => x.revision);
    expect(revisions).toEqual(revisions.map((_, i) => (revisions[0] as number) + i));
    const got: Record<string, unknown>[] = [];
    while (got.length < 300) got.push((await peer.next((f) => f.type === 'deployment.desired')).payload);
    expect(got.map((p) => p.deployment_id)).toEqual(deployments.map((d) => d.deployment_id));
    expect(got[7]).toEqual({ ...deployments[7], revision: revisions[7], deleted: false });
    const list = await h.admin('GET', `/clusters/${c.name}/deployments?limit=500`);
    expect(list.json.items).toHaveLength(300);
    peer.close();
  });

  it('concurrent single PUTs for one cluster are committed together (fewer transactions than PUTs), each answered with its own revision, and each reaches the operator once, in revision order', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const n = 40;
    const puts = await Promise.all(Array.from({ length: n }, (_, i) => h.admin('PUT', `/clusters/${c.name}/deployments/g${i}`, desired({ min_replicas: i % 3 }))));
    for (const p of puts) expect(p.status).toBe(200);
    const revisions = puts.map((p) => p.json.revision as number);
    expect(new Set(revisions).size).toBe(n);
    // now() is the transaction's start, so the deployments one statement wrote share it.
    const [row] = await h.sql<{ commits: number }>('select count(distinct updated_at)::int as commits from desired_deployments where cluster_uid = $1', [c.uid]);
    expect(row?.commits).toBeLessThan(n / 2);
    const got: Record<string, unknown>[] = [];
    while (got.length < n) got.push((await peer.next((f) => f.type === 'deployment.desired')).payload);
    expect(got.map((p) => p.revision)).toEqual([...revisions].sort((a, b) => a - b));
    puts.forEach((p, i) => expect(got.find((g) => g.deployment_id === `g${i}`)?.revision).toBe(p.json.revision));
    await new Promise((r) => setTimeout(r, 500));
    expect(peer.frames.filter((f) => f.type === 'deployment.desired')).toHaveLength(n);
    peer.close();
  });

  it('a bulk PUT is validated item by item: the error names the item and field, and nothing is stored', async () => {
    const c = await h.newCluster();
    const ok = { deployment_id: 'a', ...desired() };
    const bad = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: [ok, { deployment_id: 'b', ...desired({ min_replicas: 5, max_replicas: 1 }) }] });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'invalid', field: 'deployments.1.min_replicas' });
    const dup = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: [ok, ok] });
    expect(dup.status).toBe(400);
    expect(dup.json.error).toMatchObject({ field: 'deployments.1.deployment_id' });
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: [] })).status).toBe(400);
    expect((await h.admin('PUT', `/clusters/no-such-cluster/deployments`, { deployments: [ok] })).status).toBe(404);
    expect((await h.admin('GET', `/clusters/${c.name}/deployments`)).json.items).toEqual([]);
  });
});

describe('desired state too large for a frame (spec: Backpressure, hub → operator; welcome max_frame_bytes)', () => {
  it('a PUT whose deployment.desired frame would exceed max_frame_bytes (schema-valid, ~3 MB once JSON-escaped) is refused with 413 too_large naming serving, and nothing is stored', async () => {
    const c = await h.newCluster();
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/big`, desired({ serving: servingOf('\u0001') }));
    expect(put.status, JSON.stringify(put.json)).toBe(413);
    expect(put.json.error).toMatchObject({ code: 'too_large', field: 'serving' });
    expect(await h.sql('select 1 from desired_deployments where cluster_uid = $1', [c.uid])).toEqual([]);
  });

  it('a bulk PUT with one such item is refused with 413 naming deployments.N.serving, and none of its items is stored', async () => {
    const c = await h.newCluster();
    const deployments = [
      { deployment_id: 'ok', ...desired() },
      { deployment_id: 'big', ...desired({ serving: servingOf('\u0001') }) },
    ];
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments });
    expect(put.status, JSON.stringify(put.json)).toBe(413);
    expect(put.json.error).toMatchObject({ code: 'too_large', field: 'deployments.1.serving' });
    expect(await h.sql('select 1 from desired_deployments where cluster_uid = $1', [c.uid])).toEqual([]);
  });

  it('two deployments just under max_frame_bytes written together, made of characters JSON escapes again (quotes), are stored in the replay buffer and delivered whole', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const pinger = setInterval(() => peer.isClosed || peer.send('ping', {}, { ack: peer.hubCursor }), 500);
    onTestFinished(() => clearInterval(pinger));
    // Frames of ~0.9 MB (each quote written \", and \\\" once more when a batch of frames is bound as JSON), numbered in one pass.
    const serving = servingOf('"', 110);
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: ['q1', 'q2'].map((deployment_id) => ({ deployment_id, ...desired({ serving }) })) });
    expect(put.status, JSON.stringify(put.json)).toBe(200);
    for (const [i, id] of ['q1', 'q2'].entries()) {
      const f = await peer.next((x) => x.type === 'deployment.desired' && x.payload.deployment_id === id, 10_000);
      expect(f.payload).toMatchObject({ revision: put.json.items[i].revision, serving });
    }
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 30_000);

  it('a deployment already in Postgres too large to send (written by another plane component) does not wedge the live session: an error frame names it in its place and later changes still arrive', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    // An operator pings every interval: the wait for the poll to find the row outlasted the test
    // timers' 3 s of silence on a loaded run, and the hub closed the quiet peer 4408 meanwhile.
    const pinger = setInterval(() => peer.isClosed || peer.send('ping', {}, { ack: peer.hubCursor }), 500);
    onTestFinished(() => clearInterval(pinger));
    await h.sql(
      `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
       insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving)
       select uid, 'huge', 'w', desired_revision, 1, 1, $2::jsonb from rev`,
      [c.uid, JSON.stringify(servingOf('\u0001'))],
    );
    const err = await peer.next((x) => x.type === 'error', 10_000);
    expect(err.payload).toMatchObject({ code: 'invalid', retryable: false });
    expect(err.payload.message).toContain('huge');
    // Logged loudly, once, naming the frame the error went out as (cluster, session and seq on every line).
    const poison = lines.filter((l) => l.session === sessionId && /POISON/.test(l.msg));
    expect(poison).toEqual([expect.objectContaining({ level: 'error', cluster: c.uid, deployment_id: 'huge', seq: err.seq, frame_id: err.id })]);
    const small = await h.admin('PUT', `/clusters/${c.name}/deployments/small`, desired());
    expect(small.status).toBe(200);
    const f = await peer.next((x) => x.type === 'deployment.desired' && x.payload.deployment_id === 'small', 5_000);
    expect(f.payload.revision).toBe(small.json.revision);
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 30_000);
});
