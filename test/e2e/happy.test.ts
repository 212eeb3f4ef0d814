/**
 * The happy path, end to end: the SDK and a simulated cluster against the hub in real workerd
 * on real Postgres, with no fault at all.
 */
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();

interface OperationView {
  state: string;
  outcome_message: string | null;
  history: { kind: string; phase: string | null; message: string }[];
}

async function operationDone(id: string): Promise<OperationView> {
  return until(`operation ${id} to conclude`, async () => {
    const r = await e.admin.call('GET', `/operations/${id}`);
    if (r.status !== 200) return null;
    const op = r.json as OperationView;
    return ['succeeded', 'failed', 'cancelled', 'deadline_exceeded'].includes(op.state) ? op : null;
  });
}

describe('happy path (spec: connection lifecycle, full resync both ways, desired down, observed up, operations)', () => {
  it('register, connect, full resync both ways with prune, desired push rendered exactly, observed landing, operations round trip', async () => {
    const reg = await e.register('happy');
    // Desired state that exists before the operator first connects: it must arrive in the hub's resync.
    await e.admin.putDesired(reg.name, 'd-pre', desiredBody({ min_replicas: 2, max_replicas: 3 }));
    // A row the plane holds but the cluster does not have: the operator's complete snapshot prunes it.
    await e.query(
      `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
       values ($1, 'node-gone', 'node-gone', true, true, '{}', '[]', 8, 1000, 1000, 'an-older-session', 1)`,
      [reg.uid],
    );
    const sim = e.cluster(reg.name);
    // A deployment the cluster runs but the plane does not want: the hub's complete snapshot prunes it.
    sim.model.applyDesired({ ...desiredBody({ min_replicas: 1, max_replicas: 1 }), deployment_id: 'd-stale', revision: 1, deleted: false });

    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true };
    await converge(e.query, target);

    // hello first, then a fresh session: numbering from 1 both ways and a resync each way.
    const [link] = sim.tap.links;
    expect(link?.hello).toMatchObject({ cluster_id: reg.name, session_id: null, resume_from: null, lossy: false });
    expect(link?.welcome).toMatchObject({ full_resync: true, ack_seq: 0 });
    const session = sim.tap.sessions.get(String(link?.welcome?.session_id));
    const hubFrames = session?.received ?? [];
    expect(hubFrames[0]).toMatchObject({ type: 'resync.begin', seq: 1, payload: { scope: ['deployment'] } });
    const hubEnd = hubFrames.find((f) => f.type === 'stream.end');
    expect(hubEnd).toMatchObject({ reply_to: hubFrames[0]?.id, payload: { complete: true, count: 1 } });
    const sent = [...(session?.sent.values() ?? [])].sort((a, b) => a.seq - b.seq);
    expect(sent[0]?.seq).toBe(1);
    const begin = sent.find((f) => f.type === 'resync.begin');
    expect(begin?.payload.scope).toEqual(['cluster', 'node', 'device', 'deployment']);
    expect(sent.find((f) => f.type === 'stream.end' && f.replyTo === begin?.id)?.payload).toMatchObject({ complete: true });
    // Both prunes happened, and only those.
    expect(sim.model.deploymentIds).toEqual(['d-pre']);
    const gone = await e.query('select 1 from nodes where cluster_uid = $1 and node_id = $2', [reg.uid, 'node-gone']);
    expect(gone).toEqual([]);

    // Desired push: rendered exactly as stored, this cluster's share.
    await e.admin.putDesired(reg.name, 'd-new', desiredBody({ min_replicas: 1, max_replicas: 4 }));
    await converge(e.query, target);
    await e.admin.putDesired(reg.name, 'd-new', desiredBody({ min_replicas: 3, max_replicas: 3 }));
    await e.admin.deleteDesired(reg.name, 'd-pre');
    await converge(e.query, target);
    const held = sim.model.toJSON().deployments;
    expect(held.map((d) => [d.desired.deployment_id, d.desired.min_replicas, d.desired.max_replicas, d.replicas.length])).toEqual([['d-new', 3, 3, 3]]);
    const listing = await e.admin.must('GET', `/clusters/${reg.name}/deployments`, 200);
    const items = listing.items as { deployment_id: string; desired: { min_replicas: number; max_replicas: number } | null; observed: { replica_ids: string[] } | null; in_sync: boolean }[];
    expect(items).toEqual([
      expect.objectContaining({
        deployment_id: 'd-new',
        desired: expect.objectContaining({ min_replicas: 3, max_replicas: 3 }),
        observed: expect.objectContaining({ replica_ids: held[0]?.replicas.map((r) => r.id).sort() }),
        in_sync: true,
      }),
    ]);

    // Operations round trip: accepted, progress, result; visible in the admin API.
    const busy = held[0]?.replicas[0]?.nodeId as string;
    const drain = await e.admin.startOperation(reg.name, 'node.drain', busy);
    const idle = sim.model.snapshot().nodes.find((n) => n.node_id !== busy)?.node_id as string;
    const cordon = await e.admin.startOperation(reg.name, 'node.cordon', idle);
    const drained = await operationDone(drain);
    expect(drained.state).toBe('succeeded');
    expect(drained.history.map((h) => h.kind)).toEqual(expect.arrayContaining(['accepted', 'progress', 'result']));
    expect(drained.history.filter((h) => h.kind === 'progress').map((h) => h.phase)).toEqual(expect.arrayContaining(['cordoning', 'evicting']));
    expect(drained.history.filter((h) => h.kind === 'result')).toHaveLength(1);
    const cordoned = await operationDone(cordon);
    expect(cordoned).toMatchObject({ state: 'succeeded' });
    await converge(e.query, target);
    const nodes = await e.query<{ node_id: string; schedulable: boolean }>('select node_id, schedulable from nodes where cluster_uid = $1 order by node_id', [reg.uid]);
    expect(nodes.filter((n) => !n.schedulable).map((n) => n.node_id).sort()).toEqual([busy, idle].sort());
    // The drained node runs nothing; the deployment still runs exactly its bounds elsewhere.
    const after = sim.model.toJSON().deployments[0];
    expect(after?.replicas.every((r) => r.nodeId !== busy)).toBe(true);
    expect(after?.replicas).toHaveLength(3);

    // One session from start to end: nothing here needed a second one.
    expect(sim.client.stats.freshSessions).toBe(1);
    expect(sim.tap.links).toHaveLength(1);
  });
});
