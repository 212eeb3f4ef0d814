/**
 * A steady stream of change on both sides of the link, driven by a seeded RNG:
 * - observed: GPUs changing health (device.observed + device.event), nodes cordoned and
 *   uncordoned by someone at the cluster (node.observed + node.event);
 * - desired: deployments put with new bounds or a new image (a rollout), and withdrawn, through
 *   the admin API.
 * Independent of vitest (the soak uses it). `stop()` waits for admin calls in flight, so the
 * quiet period that follows really is quiet.
 */
import type { OperationContext } from '../../../src/operator/handlers';
import type { Admin } from './plane';
import { desiredBody } from './plane';
import type { SeededRandom } from './rng';
import type { SimCluster } from './sim-cluster';

export interface ChurnOptions {
  /** Mean interval between observed changes. */
  observedEveryMs: number;
  /** Mean interval between desired changes (0: none). */
  desiredEveryMs: number;
  /** The deployment ids this churn may put and withdraw. */
  deployments: readonly string[];
  /** Upper bound of min_replicas (max_replicas ≤ min + 2). */
  maxMin?: number;
  /** Flip GPU health (capacity may then fall short of the desired bounds). Default true. */
  gpuFlips?: boolean;
}

export interface ChurnCounts {
  gpuFlips: number;
  cordons: number;
  puts: number;
  deletes: number;
  adminErrors: number;
}

export class Churn {
  readonly counts: ChurnCounts = { gpuFlips: 0, cordons: 0, puts: 0, deletes: 0, adminErrors: 0 };
  private running = false;
  private timers = new Set<NodeJS.Timeout>();
  private inflight = new Set<Promise<void>>();
  private imageTag = 1;

  constructor(
    private readonly rng: SeededRandom,
    private readonly cluster: SimCluster,
    private readonly admin: Admin,
    private readonly options: ChurnOptions,
  ) {}

  start(): void {
    this.running = true;
    this.loop(this.options.observedEveryMs, () => this.observedChange());
    if (this.options.desiredEveryMs > 0) this.loop(this.options.desiredEveryMs, () => this.desiredChange());
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.inflight]);
  }

  private loop(meanMs: number, step: () => void): void {
    const tick = () => {
      if (!this.running) return;
      step();
      const t = setTimeout(tick, Math.max(5, Math.round(meanMs * (0.5 + this.rng.next()))));
      this.timers.add(t);
    };
    const t = setTimeout(tick, Math.round(meanMs * this.rng.next()));
    this.timers.add(t);
  }

  private observedChange(): void {
    const m = this.cluster.model;
    if (this.options.gpuFlips !== false && this.rng.chance(0.6)) {
      m.flipRandomGpu();
      this.counts.gpuFlips++;
      return;
    }
    const nodes = m.snapshot().nodes;
    if (nodes.length === 0) return;
    const n = this.rng.pick(nodes);
    // Someone at the cluster (kubectl cordon): not an operation the plane asked for.
    const ctx: OperationContext = {
      operationId: 'local',
      startId: 'local',
      deadline: Date.now() + 60_000,
      signal: new AbortController().signal,
      progress: () => {},
    };
    this.counts.cordons++;
    this.track(
      m
        .runOperation(
          { operation_id: 'local', kind: n.schedulable ? 'node.cordon' : 'node.uncordon', target: n.node_id, params: {}, deadline: new Date(ctx.deadline).toISOString() },
          ctx,
        )
        .then(() => undefined),
    );
  }

  private desiredChange(): void {
    const id = this.rng.pick(this.options.deployments);
    const name = this.cluster.name;
    if (this.rng.chance(0.15)) {
      this.counts.deletes++;
      this.track(this.admin.deleteDesired(name, id));
      return;
    }
    const min = this.rng.int(0, this.options.maxMin ?? 2);
    const max = min + this.rng.int(0, 2);
    if (this.rng.chance(0.3)) this.imageTag++;
    this.counts.puts++;
    this.track(this.admin.putDesired(name, id, desiredBody({ min_replicas: min, max_replicas: max, image: `vllm/vllm-openai:v0.6.${this.imageTag}` })).then(() => undefined));
  }

  private track(p: Promise<void>): void {
    const q = p.catch(() => {
      // A hub being restarted refuses admin calls; the next change supersedes this one anyway.
      this.counts.adminErrors++;
    });
    this.inflight.add(q);
    void q.finally(() => this.inflight.delete(q));
  }
}
