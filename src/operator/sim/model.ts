/**
 * A simulated GPU cluster: nodes with GPUs, deployments and their replica sets, and the
 * operations a plane can ask of it. It behaves like a small, fast Kubernetes:
 *
 * - A desired deployment runs exactly `min_replicas` replicas (never more than `max_replicas`),
 *   the bounds exactly as received: this cluster's share, never re-derived. Each replica takes
 *   `gpus_per_replica` free GPUs (of `gpu_model` when set) on one ready, schedulable node; what
 *   does not fit stays unplaced and the deployment reports `degraded`.
 * - A replica becomes ready `replicaStartMs` after it is placed.
 * - A change of the serving configuration replaces the replicas (new ids); a change of bounds
 *   only adds or removes replicas.
 * - Operations: `node.cordon`, `node.uncordon`, `node.drain` (cordon, evict, reschedule),
 *   `replica.restart` (the replica is replaced under a new id), `model.prefetch` (progress only).
 *
 * Everything it observes goes out through a `SimSink` (the SDK's report methods in practice).
 * Its whole state serializes to JSON so a simulated cluster can survive its own restart.
 */
import { z } from 'zod';
import { DeploymentDesiredPayload, type Payload } from '../../protocol';
import type { OperationConclusion, OperationContext } from '../handlers';
import type { Timers } from '../timers';
import { Rng } from './rng';

export interface SimSink {
  cluster(p: Payload<'cluster.observed'>): void;
  node(p: Payload<'node.observed'>): void;
  device(p: Payload<'device.observed'>): void;
  deployment(p: Payload<'deployment.observed'>): void;
  deploymentRemoved(deploymentId: string): void;
  event(kind: 'node' | 'device' | 'deployment', e: Omit<Payload<'node.event'>, 'occurred_at'>): void;
}

export interface ClusterShape {
  /** Used in ids and labels. */
  name: string;
  nodes: number;
  gpusPerNode: number;
  gpuModel?: string;
  gpuMemoryMb?: number;
  provider?: string;
  region?: string;
  /** Seed for GPU UUIDs and replica ids: the same seed gives the same cluster. */
  seed?: number;
}

export interface ModelOptions {
  timers: Timers;
  /** Placement to ready. Default 1.5 s. */
  replicaStartMs?: number;
  /** Pause between the steps of an operation. Default 500 ms. */
  stepMs?: number;
  /** Called after every change, to persist the state. */
  onChange?: () => void;
}

const Gpu = z.object({
  uuid: z.string(),
  model: z.string(),
  memoryMb: z.number(),
  health: z.enum(['healthy', 'degraded', 'unhealthy', 'unknown']),
});
const Node = z.object({
  id: z.string(),
  ready: z.boolean(),
  schedulable: z.boolean(),
  gpus: z.array(Gpu),
});
const Replica = z.object({
  id: z.string(),
  nodeId: z.string(),
  gpus: z.array(z.string()),
  ready: z.boolean(),
  /** The serving configuration it runs (JSON), to know when a change must replace it. */
  serving: z.string(),
});
const Deployment = z.object({
  desired: DeploymentDesiredPayload,
  replicas: z.array(Replica),
});
export const ModelState = z.object({
  version: z.literal(1),
  shape: z.object({
    name: z.string(),
    nodes: z.number().int().nonnegative(),
    gpusPerNode: z.number().int().nonnegative(),
    gpuModel: z.string().optional(),
    gpuMemoryMb: z.number().optional(),
    provider: z.string().optional(),
    region: z.string().optional(),
    seed: z.number().optional(),
  }),
  rngState: z.number(),
  nodes: z.array(Node),
  deployments: z.array(Deployment),
});
export type ModelState = z.infer<typeof ModelState>;
type SimNode = z.infer<typeof Node>;
type SimReplica = z.infer<typeof Replica>;
type SimDeployment = z.infer<typeof Deployment>;

function hashSeed(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

export class ClusterModel {
  private readonly nodes = new Map<string, SimNode>();
  private readonly deployments = new Map<string, SimDeployment>();
  private readonly readyTimers = new Map<string, () => void>();
  private readonly rng: Rng;
  private sink: SimSink | null = null;
  private readonly replicaStartMs: number;
  private readonly stepMs: number;

  constructor(
    readonly shape: ClusterShape,
    private readonly options: ModelOptions,
    state?: ModelState,
  ) {
    this.replicaStartMs = options.replicaStartMs ?? 1_500;
    this.stepMs = options.stepMs ?? 500;
    this.rng = new Rng(state?.rngState ?? (shape.seed ?? hashSeed(shape.name)));
    if (state) {
      for (const n of state.nodes) this.nodes.set(n.id, n);
      for (const d of state.deployments) this.deployments.set(d.desired.deployment_id, d);
    } else {
      for (let i = 1; i <= shape.nodes; i++) {
        const id = `node-${String(i).padStart(3, '0')}`;
        const gpus = Array.from({ length: shape.gpusPerNode }, () => ({
          uuid: this.rng.gpuUuid(),
          model: shape.gpuModel ?? 'H100-SXM5-80GB',
          memoryMb: shape.gpuMemoryMb ?? 81_559,
          health: 'healthy' as const,
        }));
        this.nodes.set(id, { id, ready: true, schedulable: true, gpus });
      }
    }
  }

  /** Attach the sink and report the whole cluster once. Replicas not yet ready get their timers back. */
  attach(sink: SimSink): void {
    this.sink = sink;
    sink.cluster(this.clusterPayload());
    for (const n of this.nodes.values()) {
      sink.node(this.nodePayload(n));
      for (const g of n.gpus) sink.device(this.devicePayload(n, g));
    }
    for (const d of this.deployments.values()) {
      for (const r of d.replicas) if (!r.ready) this.scheduleReady(d, r);
      sink.deployment(this.deploymentPayload(d));
    }
  }

  detach(): void {
    for (const cancel of this.readyTimers.values()) cancel();
    this.readyTimers.clear();
    this.sink = null;
  }

  toJSON(): ModelState {
    return structuredClone({
      version: 1 as const,
      shape: this.shape,
      rngState: this.rng.state,
      nodes: [...this.nodes.values()],
      deployments: [...this.deployments.values()],
    });
  }

  /** The complete observed state, as the resync snapshot wants it. */
  snapshot(): {
    cluster: Payload<'cluster.observed'>;
    nodes: Payload<'node.observed'>[];
    devices: Payload<'device.observed'>[];
    deployments: Payload<'deployment.observed'>[];
  } {
    const nodes = [...this.nodes.values()];
    return {
      cluster: this.clusterPayload(),
      nodes: nodes.map((n) => this.nodePayload(n)),
      devices: nodes.flatMap((n) => n.gpus.map((g) => this.devicePayload(n, g))),
      deployments: [...this.deployments.values()].map((d) => this.deploymentPayload(d)),
    };
  }

  get deploymentIds(): string[] {
    return [...this.deployments.keys()];
  }

  /** Totals for a human watching the simulation. */
  summary(): { nodes: number; gpus: number; gpusInUse: number; deployments: number; replicas: number; ready: number } {
    let gpus = 0;
    for (const n of this.nodes.values()) gpus += n.gpus.length;
    let replicas = 0;
    let ready = 0;
    let gpusInUse = 0;
    for (const d of this.deployments.values()) {
      replicas += d.replicas.length;
      ready += d.replicas.filter((r) => r.ready).length;
      for (const r of d.replicas) gpusInUse += r.gpus.length;
    }
    return { nodes: this.nodes.size, gpus, gpusInUse, deployments: this.deployments.size, replicas, ready };
  }

  // -------------------------------------------------------------------------------------------
  // Desired state.
  // -------------------------------------------------------------------------------------------

  /** Apply one desired deployment exactly as received. */
  applyDesired(desired: Payload<'deployment.desired'>): void {
    const id = desired.deployment_id;
    const existing = this.deployments.get(id);
    if (desired.deleted) {
      if (!existing) {
        // Already gone: say so again, the hub may not have heard.
        this.sink?.deploymentRemoved(id);
        return;
      }
      const freed = existing.replicas.length > 0;
      for (const r of existing.replicas) this.stopReplica(existing, r);
      this.deployments.delete(id);
      this.sink?.event('deployment', { subject: id, reason: 'Deleted', message: 'withdrawn from this cluster', severity: 'info' });
      this.sink?.deploymentRemoved(id);
      this.changed();
      // As a scheduler does: the GPUs it held go to a deployment waiting for them.
      if (freed) this.reconcileAll();
      return;
    }
    const d: SimDeployment = existing ?? { desired, replicas: [] };
    d.desired = desired;
    this.deployments.set(id, d);
    if (this.reconcile(d)) this.reconcileAll();
  }

  /** Remove every deployment not in `keep` (after a complete hub snapshot). */
  prune(keep: ReadonlySet<string>): string[] {
    const gone: string[] = [];
    for (const d of [...this.deployments.values()]) {
      if (keep.has(d.desired.deployment_id)) continue;
      gone.push(d.desired.deployment_id);
      this.applyDesired({ ...d.desired, deleted: true });
    }
    return gone;
  }

  /** Run the deployment's replicas as desired; true when it stopped any (capacity freed). */
  private reconcile(d: SimDeployment): boolean {
    const want = d.desired;
    const serving = JSON.stringify(want.serving);
    // A new serving configuration replaces the replicas running the old one.
    const stale = d.replicas.filter((r) => r.serving !== serving);
    for (const r of stale) this.stopReplica(d, r);
    if (stale.length > 0) {
      this.sink?.event('deployment', {
        subject: want.deployment_id,
        reason: 'Rollout',
        message: `replacing ${stale.length} replica(s) for revision ${want.revision}`,
        severity: 'info',
      });
    }
    // Exactly the bounds received: run min_replicas, never above max_replicas.
    const target = Math.min(want.min_replicas, want.max_replicas);
    let freed = stale.length > 0;
    while (d.replicas.length > target) {
      freed = true;
      const r = d.replicas[d.replicas.length - 1] as SimReplica;
      this.stopReplica(d, r);
      this.sink?.event('deployment', { subject: want.deployment_id, reason: 'ScaledDown', message: `stopped ${r.id}`, severity: 'info' });
    }
    let placed = 0;
    while (d.replicas.length < target) {
      const r = this.place(d, serving);
      if (!r) break;
      placed++;
    }
    if (placed > 0) {
      this.sink?.event('deployment', {
        subject: want.deployment_id,
        reason: 'ScaledUp',
        message: `started ${placed} replica(s); ${d.replicas.length}/${target}`,
        severity: 'info',
      });
    }
    if (d.replicas.length < target) {
      this.sink?.event('deployment', {
        subject: want.deployment_id,
        reason: 'InsufficientCapacity',
        message: `placed ${d.replicas.length} of ${target} replicas: not enough free ${want.serving?.gpu_model ? `${want.serving.gpu_model} ` : ''}GPUs`,
        severity: 'warning',
      });
    }
    this.report(d);
    this.changed();
    return freed;
  }

  private place(d: SimDeployment, serving: string): SimReplica | null {
    const need = d.desired.serving?.gpus_per_replica ?? 0;
    const model = d.desired.serving?.gpu_model ?? null;
    const inUse = this.gpusInUse();
    for (const n of this.nodes.values()) {
      if (!n.ready || !n.schedulable) continue;
      const free = n.gpus.filter((g) => !inUse.has(g.uuid) && g.health === 'healthy' && (model === null || g.model === model));
      if (free.length < need) continue;
      const taken = new Set(d.replicas.map((x) => x.id));
      let id = this.rng.replicaId(d.desired.deployment_id);
      while (taken.has(id)) id = this.rng.replicaId(d.desired.deployment_id);
      const r: SimReplica = {
        id,
        nodeId: n.id,
        gpus: free.slice(0, need).map((g) => g.uuid),
        ready: false,
        serving,
      };
      d.replicas.push(r);
      this.scheduleReady(d, r);
      return r;
    }
    return null;
  }

  private scheduleReady(d: SimDeployment, r: SimReplica): void {
    const cancel = this.options.timers.schedule(() => {
      this.readyTimers.delete(r.id);
      if (!d.replicas.includes(r)) return;
      r.ready = true;
      this.report(d);
      this.changed();
    }, this.replicaStartMs);
    this.readyTimers.set(r.id, cancel);
  }

  private stopReplica(d: SimDeployment, r: SimReplica): void {
    this.readyTimers.get(r.id)?.();
    this.readyTimers.delete(r.id);
    d.replicas = d.replicas.filter((x) => x !== r);
  }

  private gpusInUse(): Set<string> {
    const s = new Set<string>();
    for (const d of this.deployments.values()) for (const r of d.replicas) for (const g of r.gpus) s.add(g);
    return s;
  }

  /** Give every deployment short of its target another chance to place (capacity came back). */
  private reconcileAll(): void {
    for (const d of this.deployments.values()) {
      if (d.replicas.length < Math.min(d.desired.min_replicas, d.desired.max_replicas)) this.reconcile(d);
    }
  }

  // -------------------------------------------------------------------------------------------
  // Operations.
  // -------------------------------------------------------------------------------------------

  async runOperation(op: Payload<'operation.start'>, ctx: OperationContext): Promise<OperationConclusion> {
    switch (op.kind) {
      case 'node.cordon':
      case 'node.uncordon': {
        const n = this.nodes.get(op.target);
        if (!n) return { outcome: 'failed', message: `no node ${op.target}` };
        const schedulable = op.kind === 'node.uncordon';
        ctx.progress(schedulable ? 'uncordoning' : 'cordoning', n.id);
        this.setSchedulable(n, schedulable);
        if (schedulable) this.reconcileAll();
        return { outcome: 'succeeded', message: `${n.id} ${schedulable ? 'uncordoned' : 'cordoned'}` };
      }
      case 'node.drain': {
        const n = this.nodes.get(op.target);
        if (!n) return { outcome: 'failed', message: `no node ${op.target}` };
        ctx.progress('cordoning', n.id);
        this.setSchedulable(n, false);
        const victims = [...this.deployments.values()].flatMap((d) => d.replicas.filter((r) => r.nodeId === n.id).map((r) => ({ d, r })));
        let evicted = 0;
        for (const { d, r } of victims) {
          if (ctx.signal.aborted) return { outcome: 'cancelled', message: `drain stopped after ${evicted} eviction(s)` };
          await this.sleep(this.stepMs);
          if (!d.replicas.includes(r)) continue;
          ctx.progress('evicting', `${r.id} (${++evicted}/${victims.length})`);
          this.stopReplica(d, r);
          this.reconcile(d);
        }
        this.sink?.event('node', { subject: n.id, reason: 'Drained', message: `evicted ${evicted} replica(s)`, severity: 'info' });
        return { outcome: 'succeeded', message: `${n.id} drained: ${evicted} replica(s) evicted` };
      }
      case 'replica.restart': {
        for (const d of this.deployments.values()) {
          const r = d.replicas.find((x) => x.id === op.target);
          if (!r) continue;
          ctx.progress('stopping', r.id);
          this.stopReplica(d, r);
          await this.sleep(this.stepMs);
          // Withdrawn (or pruned) meanwhile: starting a replica for it would report a deployment
          // the cluster no longer has, after its removal.
          if (this.deployments.get(d.desired.deployment_id) !== d) return { outcome: 'cancelled', message: `${r.id} stopped; its deployment was withdrawn before a replacement started` };
          ctx.progress('starting', d.desired.deployment_id);
          this.reconcile(d);
          this.sink?.event('deployment', { subject: d.desired.deployment_id, reason: 'ReplicaRestarted', message: `${r.id} restarted`, severity: 'info' });
          return { outcome: 'succeeded', message: `${r.id} replaced` };
        }
        return { outcome: 'failed', message: `no replica ${op.target}` };
      }
      case 'model.prefetch': {
        for (const pct of [25, 50, 75, 100]) {
          if (ctx.signal.aborted) return { outcome: 'cancelled', message: `prefetch of ${op.target} stopped at ${pct - 25}%` };
          await this.sleep(this.stepMs);
          ctx.progress('downloading', `${op.target}: ${pct}%`);
        }
        return { outcome: 'succeeded', message: `${op.target} cached on ${this.nodes.size} node(s)` };
      }
    }
  }

  /** Flip one GPU's health (a simulated hardware fault or its recovery). */
  flipRandomGpu(): void {
    const all = [...this.nodes.values()].flatMap((n) => n.gpus.map((g) => ({ n, g })));
    if (all.length === 0) return;
    const { n, g } = all[Math.floor(this.rng.next() * all.length)] as { n: SimNode; g: z.infer<typeof Gpu> };
    g.health = g.health === 'healthy' ? 'degraded' : 'healthy';
    this.sink?.event('device', {
      subject: g.uuid,
      reason: g.health === 'healthy' ? 'Recovered' : 'XidError',
      message: g.health === 'healthy' ? 'GPU healthy again' : 'Xid 79: GPU has fallen off the bus (simulated)',
      severity: g.health === 'healthy' ? 'info' : 'warning',
    });
    this.sink?.device(this.devicePayload(n, g));
    if (g.health === 'healthy') this.reconcileAll();
    this.changed();
  }

  private setSchedulable(n: SimNode, schedulable: boolean): void {
    if (n.schedulable === schedulable) return;
    n.schedulable = schedulable;
    this.sink?.event('node', { subject: n.id, reason: schedulable ? 'Uncordoned' : 'Cordoned', message: n.id, severity: 'info' });
    this.sink?.node(this.nodePayload(n));
    this.changed();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.options.timers.schedule(resolve, ms));
  }

  private changed(): void {
    this.options.onChange?.();
  }

  // -------------------------------------------------------------------------------------------
  // Observed payloads.
  // -------------------------------------------------------------------------------------------

  private report(d: SimDeployment): void {
    this.sink?.deployment(this.deploymentPayload(d));
  }

  private clusterPayload(): Payload<'cluster.observed'> {
    return {
      kubernetes_version: 'v1.30.4-sim',
      provider: this.shape.provider ?? 'wingsmith-sim',
      region: this.shape.region ?? 'local',
      labels: { 'wingsmith.dev/simulated': 'true', 'wingsmith.dev/cluster': this.shape.name.slice(0, 256) },
    };
  }

  private nodePayload(n: SimNode): Payload<'node.observed'> {
    return {
      node_id: n.id,
      name: n.id,
      ready: n.ready,
      schedulable: n.schedulable,
      labels: { 'nvidia.com/gpu.product': n.gpus[0]?.model ?? 'none', 'nvidia.com/gpu.count': String(n.gpus.length) },
      taints: n.schedulable ? [] : [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }],
      allocatable: { gpus: n.gpus.length, cpu_millis: 96_000, memory_mb: 1_024 * 1_024 },
    };
  }

  private devicePayload(n: SimNode, g: z.infer<typeof Gpu>): Payload<'device.observed'> {
    return {
      device_id: g.uuid,
      node_id: n.id,
      vendor: 'NVIDIA',
      model: g.model,
      memory_total_mb: g.memoryMb,
      health: g.health,
      driver_version: '550.90.07',
    };
  }

  private deploymentPayload(d: SimDeployment): Payload<'deployment.observed'> {
    const target = Math.min(d.desired.min_replicas, d.desired.max_replicas);
    const ready = d.replicas.filter((r) => r.ready).length;
    const phase = d.replicas.length < target ? 'degraded' : ready < target ? 'progressing' : 'ready';
    const message =
      phase === 'degraded'
        ? `placed ${d.replicas.length} of ${target} replicas: insufficient GPU capacity`
        : `${ready}/${target} replicas ready`;
    return {
      deployment_id: d.desired.deployment_id,
      observed_revision: d.desired.revision,
      phase,
      ready_replicas: ready,
      replica_ids: d.replicas.map((r) => r.id),
      message,
    };
  }
}
