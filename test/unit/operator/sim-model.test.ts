import { describe, expect, it } from 'vitest';
import type { OperationContext } from '../../../src/operator/handlers';
import { ClusterModel, ModelState, type SimSink } from '../../../src/operator/sim/model';
import { CATALOG, newId, type Payload } from '../../../src/protocol';
import { desiredPayload } from './support/harness';
import { ManualTimers } from './support/manual-timers';

function setup(nodes = 2, gpusPerNode = 4) {
  const timers = new ManualTimers();
  const model = new ClusterModel({ name: 'sim-a', nodes, gpusPerNode, seed: 7 }, { timers, replicaStartMs: 1_000, stepMs: 10 });
  const seen: { type: string; payload: unknown }[] = [];
  const sink: SimSink = {
    cluster: (p) => seen.push({ type: 'cluster.observed', payload: p }),
    node: (p) => seen.push({ type: 'node.observed', payload: p }),
    device: (p) => seen.push({ type: 'device.observed', payload: p }),
    deployment: (p) => seen.push({ type: 'deployment.observed', payload: p }),
    deploymentRemoved: (id) => seen.push({ type: 'deployment.removed', payload: { deployment_id: id } }),
    event: (kind, e) => seen.push({ type: `${kind}.event`, payload: { ...e, occurred_at: new Date(0).toISOString() } }),
  };
  model.attach(sink);
  const lastDeployment = (id: string) =>
    seen.filter((s) => s.type === 'deployment.observed' && (s.payload as { deployment_id: string }).deployment_id === id).at(-1)
      ?.payload as Payload<'deployment.observed'> | undefined;
  return { timers, model, seen, lastDeployment };
}

function opCtx(): OperationContext & { steps: string[] } {
  const steps: string[] = [];
  return { operationId: newId(), startId: newId(), deadline: Date.now() + 60_000, signal: new AbortController().signal, progress: (p, m) => steps.push(`${p}:${m ?? ''}`), steps };
}

/** Let the model's step timers run while an operation awaits them. */
async function runWithTime<T>(timers: ManualTimers, p: Promise<T>): Promise<T> {
  let done = false;
  void p.finally(() => (done = true));
  while (!done) {
    timers.advance(10);
    await new Promise((r) => setTimeout(r, 0));
  }
  return p;
}

describe('simulated cluster model', () => {
  it('reports every node and GPU (UUIDs, capacity) and every payload fits the catalog', () => {
    const { seen } = setup();
    expect(seen.filter((s) => s.type === 'node.observed')).toHaveLength(2);
    const devices = seen.filter((s) => s.type === 'device.observed').map((s) => s.payload as Payload<'device.observed'>);
    expect(devices).toHaveLength(8);
    expect(new Set(devices.map((d) => d.device_id)).size).toBe(8);
    expect(devices.every((d) => /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(d.device_id))).toBe(true);
    for (const s of seen) expect(CATALOG[s.type as keyof typeof CATALOG].schema.safeParse(s.payload).success).toBe(true);
  });

  it('runs exactly min_replicas, within max, and reports them ready after they start', () => {
    const { model, timers, lastDeployment } = setup();
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 3, max_replicas: 8 }));
    expect(lastDeployment('d1')).toMatchObject({ phase: 'progressing', ready_replicas: 0, observed_revision: 1 });
    expect(lastDeployment('d1')?.replica_ids).toHaveLength(3);
    timers.advance(1_000);
    expect(lastDeployment('d1')).toMatchObject({ phase: 'ready', ready_replicas: 3 });
    expect(model.summary()).toMatchObject({ gpusInUse: 3, replicas: 3, ready: 3 });
  });

  it('never places more than the GPUs it has: the shortfall is reported as degraded', () => {
    const { model, lastDeployment, seen } = setup(1, 4);
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 3, max_replicas: 3, serving: { ...desiredPayload('x').serving!, gpus_per_replica: 2 } }));
    expect(lastDeployment('d1')).toMatchObject({ phase: 'degraded' });
    expect(lastDeployment('d1')?.replica_ids).toHaveLength(2);
    expect(seen.some((s) => s.type === 'deployment.event' && (s.payload as { reason: string }).reason === 'InsufficientCapacity')).toBe(true);
  });

  it('scales down on smaller bounds, replaces replicas on a new serving config, and removes on delete', () => {
    const { model, lastDeployment, seen } = setup();
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 3, max_replicas: 3 }));
    const before = lastDeployment('d1')!.replica_ids;
    model.applyDesired(desiredPayload('d1', 2, { min_replicas: 1, max_replicas: 1 }));
    expect(lastDeployment('d1')!.replica_ids).toEqual(before.slice(0, 1));
    model.applyDesired(desiredPayload('d1', 3, { min_replicas: 1, max_replicas: 1, serving: { ...desiredPayload('x').serving!, image: 'vllm:v2' } }));
    expect(lastDeployment('d1')!.replica_ids).toHaveLength(1);
    expect(lastDeployment('d1')!.replica_ids[0]).not.toBe(before[0]);
    model.applyDesired({ ...desiredPayload('d1', 4), deleted: true, serving: null });
    expect(seen.at(-1)).toEqual({ type: 'deployment.removed', payload: { deployment_id: 'd1' } });
    expect(model.summary().gpusInUse).toBe(0);
  });

  it('drains a node: cordons it, evicts its replicas with progress, and reschedules them elsewhere', async () => {
    const { model, timers, lastDeployment } = setup(2, 2);
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 2, max_replicas: 2 }));
    const ctx = opCtx();
    const result = await runWithTime(timers, model.runOperation({ operation_id: newId(), kind: 'node.drain', target: 'node-001', params: {}, deadline: new Date(Date.now() + 60_000).toISOString() }, ctx));
    expect(result.outcome).toBe('succeeded');
    expect(ctx.steps[0]).toBe('cordoning:node-001');
    expect(ctx.steps.filter((s) => s.startsWith('evicting'))).toHaveLength(2);
    expect(lastDeployment('d1')!.replica_ids).toHaveLength(2);
    const state = ModelState.parse(model.toJSON());
    expect(state.nodes.find((n) => n.id === 'node-001')?.schedulable).toBe(false);
    expect(state.deployments[0]?.replicas.every((r) => r.nodeId === 'node-002')).toBe(true);
  });

  it('fails an operation on a target it does not have, and restarts a replica under a new id', async () => {
    const { model, timers, lastDeployment } = setup();
    const bad = await model.runOperation({ operation_id: newId(), kind: 'node.cordon', target: 'nope', params: {}, deadline: '2030-01-01T00:00:00Z' }, opCtx());
    expect(bad.outcome).toBe('failed');
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 1, max_replicas: 1 }));
    const old = lastDeployment('d1')!.replica_ids[0]!;
    const r = await runWithTime(timers, model.runOperation({ operation_id: newId(), kind: 'replica.restart', target: old, params: {}, deadline: '2030-01-01T00:00:00Z' }, opCtx()));
    expect(r.outcome).toBe('succeeded');
    expect(lastDeployment('d1')!.replica_ids).toHaveLength(1);
    expect(lastDeployment('d1')!.replica_ids[0]).not.toBe(old);
  });

  it('a replica restart whose deployment is withdrawn meanwhile starts nothing: no report of the deployment after its removal', async () => {
    // Before, the restart started a replacement into the withdrawn deployment and reported it
    // (progressing, then ready) after its removal: the hub showed a deployment the cluster lacked.
    const { model, timers, seen, lastDeployment } = setup();
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 1, max_replicas: 1 }));
    const old = lastDeployment('d1')!.replica_ids[0]!;
    const restart = model.runOperation({ operation_id: newId(), kind: 'replica.restart', target: old, params: {}, deadline: '2030-01-01T00:00:00Z' }, opCtx());
    model.applyDesired(desiredPayload('d1', 2, { deleted: true }));
    const removedAt = seen.findIndex((x) => x.type === 'deployment.removed');
    const r = await runWithTime(timers, restart);
    timers.advance(2_000);
    expect(r.outcome).toBe('cancelled');
    expect(model.deploymentIds).toEqual([]);
    expect(seen.slice(removedAt + 1).filter((x) => x.type === 'deployment.observed')).toEqual([]);
  });

  it('GPUs freed by a withdrawal or a scale-down go to a deployment waiting for them', () => {
    // Before, only an uncordon or a GPU's recovery gave a waiting deployment another chance.
    const { model, lastDeployment } = setup(1, 8);
    const eight = (id: string, rev: number, min = 1) => desiredPayload(id, rev, { min_replicas: min, max_replicas: Math.max(min, 1), serving: { ...desiredPayload(id).serving!, gpus_per_replica: 8 } });
    model.applyDesired(eight('big', 1));
    model.applyDesired(eight('small', 2));
    expect(lastDeployment('small')).toMatchObject({ phase: 'degraded', replica_ids: [] });
    model.applyDesired(desiredPayload('big', 3, { deleted: true }));
    expect(lastDeployment('small')!.replica_ids).toHaveLength(1);

    model.applyDesired(eight('other', 4));
    expect(lastDeployment('other')).toMatchObject({ phase: 'degraded', replica_ids: [] });
    model.applyDesired(eight('small', 5, 0)); // scaled to zero
    expect(lastDeployment('other')!.replica_ids).toHaveLength(1);
  });

  it('prunes deployments absent from a complete snapshot', () => {
    const { model } = setup();
    model.applyDesired(desiredPayload('keep'));
    model.applyDesired(desiredPayload('drop'));
    expect(model.prune(new Set(['keep']))).toEqual(['drop']);
    expect(model.deploymentIds).toEqual(['keep']);
  });

  it('round-trips its whole state through JSON', () => {
    const { model, timers } = setup();
    model.applyDesired(desiredPayload('d1', 1, { min_replicas: 2, max_replicas: 2 }));
    const again = new ClusterModel(model.shape, { timers }, ModelState.parse(JSON.parse(JSON.stringify(model.toJSON()))));
    expect(again.snapshot()).toEqual(model.snapshot());
  });
});
