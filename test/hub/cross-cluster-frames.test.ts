/**
 * A cluster's token reaches its own cluster only: every field of every frame an operator sends is
 * its own to choose, and none of them reads, writes or disturbs another cluster. The operator of
 * cluster A here knows everything of cluster B that could leak (its uid and name, its session id,
 * its subjects' ids, its operation and its start frame's id, its event frame ids, the ids of the
 * frames B's session was sent) and uses all of it; B's rows, its claim and its session stay as
 * they were, and nothing the hub tells A names B.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { desired, device, FAST_TIMERS, node, useHub, type Frame, type Peer } from './support/hub';

// B stays silent while A works: no silence close meanwhile.
const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '5000', IDLE_TIMEOUT_MS: '30000' });

/** Every row of B that A could try to touch, as the admin and Postgres see it. */
async function rowsOf(uid: string): Promise<unknown> {
  const q = (text: string) => h.sql(text, [uid]);
  return {
    nodes: await q('select node_id, name, ready, obs_session, obs_seq from nodes where cluster_uid = $1 order by 1'),
    devices: await q('select device_id, node_id, model, obs_session, obs_seq from devices where cluster_uid = $1 order by 1'),
    deployments: await q('select deployment_id, observed_revision, phase, message, obs_session from observed_deployments where cluster_uid = $1 order by 1'),
    replicas: await q('select deployment_id, replica_id from replicas where cluster_uid = $1 order by 1, 2'),
    cluster: await q('select kubernetes_version, provider, obs_session from observed_clusters where cluster_uid = $1'),
    events: await q('select frame_id, subject, reason, session_id from events where cluster_uid = $1 order by 1'),
    operations: await q('select operation_id, state, accepted_at, concluded_at, outcome_message, start_frame_ids from operations where cluster_uid = $1 order by 1'),
    operationEvents: await q('select e.operation_id, e.frame_id, e.kind from operation_events e join operations o using (operation_id) where o.cluster_uid = $1 order by 1, 2'),
    rejections: await q('select session_id, seq, type from rejections where cluster_uid = $1 order by 1, 2'),
    desired: await q('select deployment_id, revision, refusals, last_refusal from desired_deployments where cluster_uid = $1 order by 1'),
    owner: await q('select session_id, generation, connected, revoked, remote_addr, operator_version from cluster_owners where cluster_uid = $1'),
    live: await q('select session_id, generation from live_sessions where cluster_uid = $1 order by 1'),
    linkStats: await q('select epoch, dropped_events from link_stats where cluster_uid = $1'),
  };
}

/** Everything a peer was told, as text: frames and the close. */
function heard(p: Peer, closeReason = ''): string {
  return JSON.stringify(p.frames) + closeReason;
}

describe('one cluster cannot reach another through its frames', () => {
  it("A's frames naming B's ids write nothing of B, disturb B's session, or tell A anything about B", async () => {
    const a = await h.newCluster('iso-a');
    const b = await h.newCluster('iso-b');

    // B: a live session with observed rows, an event, a desired deployment it was sent, and an
    // operation it was sent and accepted.
    const { peer: pb, sessionId: sb } = await h.openFresh(b);
    const bResync = pb.frames.find((f) => f.type === 'resync.begin') as Frame;
    pb.send('cluster.observed', { kubernetes_version: '1.30.2', provider: 'eks', region: 'eu-west-1', labels: {} });
    pb.send('node.observed', node('n1'));
    pb.send('device.observed', device('GPU-1'));
    pb.send('deployment.observed', { deployment_id: 'd1', observed_revision: null, phase: 'ready', ready_replicas: 1, replica_ids: ['r1'], message: 'b' });
    const bEvent = pb.send('node.event', { subject: 'n1', reason: 'Ready', message: 'b', severity: 'info', occurred_at: '2026-01-01T00:00:00Z' });
    await pb.ackedThrough(pb.nextSeq - 1);
    expect((await h.admin('PUT', `/clusters/${b.name}/deployments/d1`, desired())).status).toBe(200);
    const bDesired = await pb.next((f) => f.type === 'deployment.desired');
    const op = await h.admin('POST', `/clusters/${b.name}/operations`, { kind: 'node.drain', target: 'n1', params: {}, deadline_s: 300 });
    expect(op.status).toBe(202);
    const opId = op.json.operation_id as string;
    const bStart = await pb.next((f) => f.type === 'operation.start' && f.payload.operation_id === opId);
    pb.send('operation.accepted', { operation_id: opId }, { reply_to: bStart.id });
    await pb.ackedThrough(pb.nextSeq - 1);
    const before = await rowsOf(b.uid);

    // A hello naming B (by name and by uid) on A's token is a protocol error that names nothing of B.
    for (const clusterId of [b.name, b.uid]) {
      const p = await h.connect(a.token);
      p.send('hello', { cluster_id: clusterId, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      const closed = await p.closedWith(5_000);
      expect(closed.code).toBe(4400);
      for (const secret of [b.uid, b.name, sb]) expect(heard(p, closed.reason)).not.toContain(secret);
    }

    // A resumes "B's session": B's session id as the routing hint and in the hello.
    const pa = await h.connect(a.token, sb);
    const welcome = await pa.hello({ cluster_id: a.name, session_id: sb, resume_from: 0 });
    expect(welcome.payload.full_resync).toBe(true);
    expect(welcome.payload.session_id).not.toBe(sb);
    await pa.next((f) => f.type === 'stream.end');

    // B's subjects, B's event frame id, a resync whose prune would empty every scope.
    pa.send('cluster.observed', { kubernetes_version: '0.0.1', provider: 'evil', region: 'x', labels: {} });
    pa.send('node.observed', { ...node('n1'), name: 'evil' });
    pa.send('device.observed', device('GPU-1', { model: 'evil' }));
    pa.send('deployment.observed', { deployment_id: 'd1', observed_revision: 1, phase: 'failed', ready_replicas: 0, replica_ids: ['evil'], message: 'evil' });
    pa.send('node.event', { subject: 'n1', reason: 'Evil', message: 'evil', severity: 'error', occurred_at: '2026-01-01T00:00:00Z' }, { id: bEvent });
    pa.send('node.removed', { node_id: 'n1' });
    pa.send('device.removed', { device_id: 'GPU-1' });
    pa.send('deployment.removed', { deployment_id: 'd1' });
    const begin = pa.send('resync.begin', { scope: ['cluster', 'node', 'device', 'deployment'] });
    pa.send('stream.end', { complete: true, count: 0 }, { reply_to: begin });
    // B's operation, answered through its id and through B's start frame; the same for an
    // operation nobody has, to compare what A is told.
    const fakeOp = newId();
    for (const id of [opId, fakeOp]) {
      pa.send('operation.progress', { operation_id: id, phase: 'evil', message: 'evil' }, { reply_to: bStart.id });
      pa.send('operation.result', { operation_id: id, outcome: 'failed', message: 'evil' }, { reply_to: bStart.id });
    }
    pa.send('error', { code: 'invalid', message: 'evil', retryable: false }, { reply_to: bStart.id });
    // A refusal of B's desired deployment, and the end of B's hub resync stream.
    pa.send('error', { code: 'invalid', message: 'evil', retryable: false }, { reply_to: bDesired.id });
    pa.send('stream.end', { complete: true, count: 0 }, { reply_to: bResync.id });
    await pa.ackedThrough(pa.nextSeq - 1);

    // B is as it was; its session still holds its claim and still works.
    expect(await rowsOf(b.uid)).toEqual(before);
    pb.send('node.observed', node('n2'));
    await pb.ackedThrough(pb.nextSeq - 1);
    expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [b.uid])).map((r) => r.node_id)).toEqual(['n1', 'n2']);
    expect(pb.isClosed).toBe(false);

    // A was told nothing of B: the answer about B's operation is the answer about no operation.
    const told = heard(pa);
    for (const secret of [b.uid, b.name, sb]) expect(told).not.toContain(secret);
    const aboutOps = pa.frames.filter((f) => JSON.stringify(f.payload).includes(opId) || JSON.stringify(f.payload).includes(fakeOp));
    const masked = (id: string) => JSON.stringify(aboutOps.filter((f) => JSON.stringify(f.payload).includes(id)).map((f) => JSON.stringify(f.payload).replaceAll(id, 'ID')));
    expect(masked(opId)).not.toBe('[]');
    expect(masked(opId)).toBe(masked(fakeOp));
    const rejections = await h.sql<{ reason: string }>('select reason from rejections where cluster_uid = $1 order by seq', [a.uid]);
    const reasons = rejections.map((r) => r.reason);
    expect(reasons.some((r) => r.includes(opId))).toBe(true);
    expect(reasons.filter((r) => r.includes(opId)).map((r) => r.replaceAll(opId, 'ID'))).toEqual(reasons.filter((r) => r.includes(fakeOp)).map((r) => r.replaceAll(fakeOp, 'ID')));
    pa.close();
    pb.close();
  }, 60_000);
});
