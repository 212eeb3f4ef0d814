/**
 * A simulated cluster wired to the SDK: the model reports through `OperatorClient`, desired
 * deployments and operations from the hub drive the model. This is also the reference for how
 * an operator embeds the SDK: handlers apply and persist before they say `applied`, the
 * snapshot comes from the same state the reports do, and the cursor lives beside that state.
 */
import path from 'node:path';
import { OperatorClient } from '../client';
import { MemoryCursorStore } from '../cursor-store';
import { openFileStores } from '../file-stores';
import { applied } from '../handlers';
import type { Logger } from '../logger';
import { systemTimers, type Timers } from '../timers';
import type { Dialer } from '../transport';
import { ClusterModel, type ClusterShape } from './model';
import { SimStateFile } from './state-file';

export interface SimulatedClusterOptions {
  hubUrl: string;
  token: string;
  /** The cluster's uid or name as registered with the hub. */
  clusterId: string;
  shape: Omit<ClusterShape, 'name'> & { name?: string };
  logger: Logger;
  /** Keep the cluster's state, the cursor and the outbound log here; omit for memory only. */
  stateDir?: string;
  operatorVersion?: string;
  timers?: Timers;
  dial?: Dialer;
  replicaStartMs?: number;
  stepMs?: number;
  /** Stream a reconciliation snapshot this often. Default 15 min; 0 turns it off. */
  resyncEveryMs?: number;
  /** Flip a random GPU's health this often (a simulated fault). 0 (default) turns it off. */
  chaosEveryMs?: number;
}

export class SimulatedCluster {
  private cancelResync: () => void = () => {};
  private cancelChaos: () => void = () => {};

  private constructor(
    readonly client: OperatorClient,
    readonly model: ClusterModel,
    private readonly stateFile: SimStateFile | null,
    private readonly options: SimulatedClusterOptions,
    private readonly timers: Timers,
  ) {}

  static async create(options: SimulatedClusterOptions): Promise<SimulatedCluster> {
    const timers = options.timers ?? systemTimers;
    const shape: ClusterShape = { ...options.shape, name: options.shape.name ?? options.clusterId };
    const dir = options.stateDir ? path.join(options.stateDir, safeDirName(options.clusterId)) : null;
    const stores = dir ? await openFileStores(dir) : { cursorStore: new MemoryCursorStore(), outboundLog: undefined };
    const stateFile = dir ? new SimStateFile(path.join(dir, 'cluster.json')) : null;
    const saved = stateFile ? await stateFile.load() : null;

    let model: ClusterModel | null = null;
    const persist = () => {
      if (stateFile && model) stateFile.request(() => (model as ClusterModel).toJSON());
    };
    model = new ClusterModel(
      shape,
      {
        timers,
        ...(options.replicaStartMs !== undefined ? { replicaStartMs: options.replicaStartMs } : {}),
        ...(options.stepMs !== undefined ? { stepMs: options.stepMs } : {}),
        onChange: persist,
      },
      saved ?? undefined,
    );
    const m = model;
    const flush = async () => stateFile?.flush();

    const client = new OperatorClient({
      url: options.hubUrl,
      token: options.token,
      clusterId: options.clusterId,
      operatorVersion: options.operatorVersion ?? 'dev',
      cursorStore: stores.cursorStore,
      ...(stores.outboundLog ? { outboundLog: stores.outboundLog } : {}),
      logger: options.logger,
      timers,
      ...(options.dial ? { dial: options.dial } : {}),
      snapshot: () => m.snapshot(),
      handlers: {
        desired: async (payload) => {
          m.applyDesired(payload);
          // Applied means durable: the state must be on disk before the hub is told.
          await flush();
          return applied();
        },
        pruneDesired: async (keep) => {
          const gone = m.prune(keep);
          if (gone.length > 0) options.logger.info('pruned deployments absent from the hub snapshot', { gone });
          await flush();
          return applied();
        },
        operation: async (payload, ctx) => {
          const result = await m.runOperation(payload, ctx);
          await flush();
          return result;
        },
      },
    });
    return new SimulatedCluster(client, model, stateFile, options, timers);
  }

  async start(): Promise<void> {
    const c = this.client;
    this.model.attach({
      cluster: (p) => c.reportCluster(p),
      node: (p) => c.reportNode(p),
      device: (p) => c.reportDevice(p),
      deployment: (p) => c.reportDeployment(p),
      deploymentRemoved: (id) => c.removeDeployment(id),
      event: (kind, e) => c.emitEvent(kind, e),
    });
    await c.start();
    const every = this.options.resyncEveryMs ?? 15 * 60_000;
    if (every > 0) {
      const tick = () => {
        c.resync();
        this.cancelResync = this.timers.schedule(tick, every);
      };
      this.cancelResync = this.timers.schedule(tick, every);
    }
    const chaos = this.options.chaosEveryMs ?? 0;
    if (chaos > 0) {
      const tick = () => {
        this.model.flipRandomGpu();
        this.cancelChaos = this.timers.schedule(tick, chaos);
      };
      this.cancelChaos = this.timers.schedule(tick, chaos);
    }
  }

  async stop(options: { graceful?: boolean } = {}): Promise<void> {
    this.cancelResync();
    this.cancelChaos();
    await this.client.stop(options);
    this.model.detach();
    await this.stateFile?.flush();
  }
}

function safeDirName(id: string): string {
  return id.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 128) || 'cluster';
}
