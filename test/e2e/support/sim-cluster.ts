/**
 * A simulated cluster for the end-to-end suites: the cluster itself (a `ClusterModel`, standing
 * in for Kubernetes and its CRDs) outlives any one operator process (an `OperatorClient` wired
 * to it exactly as `src/operator/sim/cluster.ts` does). That split is what lets a test crash the
 * operator, start another one against the same cluster, and ask whether the plane converged to
 * the cluster rather than to whatever the dead process last said.
 *
 * Everything the checker needs to know is counted here: events handed to the SDK, operation
 * handler runs per operation id, and every frame on the wire (`WireTap`, shared by every
 * operator process of this cluster). Independent of vitest (the soak script uses it).
 */
import { OperatorClient, type OperatorClientOptions } from '../../../src/operator/client';
import { MemoryCursorStore, type CursorStore } from '../../../src/operator/cursor-store';
import { abandonFileStoresLock, openFileStores } from '../../../src/operator/file-stores';
import { applied } from '../../../src/operator/handlers';
import { silentLogger, type Logger } from '../../../src/operator/logger';
import type { OutboundLog } from '../../../src/operator/outbound-log';
import { ClusterModel, type ClusterShape } from '../../../src/operator/sim/model';
import type { Timers } from '../../../src/operator/timers';
import { WireTap } from './wire-tap';

/**
 * Timers that can be frozen: a crashed process runs nothing any more. Freezing cancels what is
 * scheduled and turns later `schedule` calls into no-ops, so the dead client never reconnects,
 * pings, retries or saves again.
 */
export class FreezableTimers implements Timers {
  private frozen = false;
  private readonly pending = new Set<NodeJS.Timeout>();

  now(): number {
    return Date.now();
  }

  schedule(fn: () => void, ms: number): () => void {
    if (this.frozen) return () => {};
    const t = setTimeout(
      () => {
        this.pending.delete(t);
        if (!this.frozen) fn();
      },
      Math.min(Math.max(0, ms), 2 ** 31 - 1),
    );
    this.pending.add(t);
    return () => {
      clearTimeout(t);
      this.pending.delete(t);
    };
  }

  freeze(): void {
    this.frozen = true;
    for (const t of this.pending) clearTimeout(t);
    this.pending.clear();
  }
}

/** Client options tests commonly tune; the rest are the SDK's defaults. */
export type ClientTuning = Partial<
  Pick<
    OperatorClientOptions,
    | 'backoff'
    | 'sendQueueCapacity'
    | 'statsIntervalMs'
    | 'ackDelayMs'
    | 'drainTimeoutMs'
    | 'pingIntervalMs'
    | 'idleTimeoutMs'
    | 'stableAfterMs'
    | 'retry'
    | 'random'
    | 'operatorVersion'
  >
>;

/** Where an operator process keeps its durable state. */
export type Storage =
  /** Memory only, and nothing survives the process: every start is a brand-new operator. */
  | { kind: 'none' }
  /** The cursor record survives (e.g. kept beside the CRDs), the outbound buffer is in memory. */
  | { kind: 'memory'; cursorStore: MemoryCursorStore }
  /** FileCursorStore + FileOutboundLog in a directory: even a crash can resume. */
  | { kind: 'files'; dir: string };

export interface OperatorProcess {
  readonly client: OperatorClient;
  readonly timers: FreezableTimers;
  readonly token: string;
  /** The directory of its file stores, when it has them. */
  readonly stateDir: string | null;
  stopped: boolean;
}

export interface SimClusterOptions {
  /** The cluster's name (as registered): also the model's name. */
  name: string;
  shape?: Partial<Omit<ClusterShape, 'name'>>;
  /** Fast replica start-up and operation steps keep the suites short. */
  replicaStartMs?: number;
  stepMs?: number;
  logger?: Logger;
}

export class SimCluster {
  readonly model: ClusterModel;
  readonly tap = new WireTap();
  /** Events handed to the SDK (accepted or not by its queue). */
  eventsEmitted = 0;
  /** How many times an operation handler started, per operation id (over every process). */
  readonly operationRuns = new Map<string, number>();
  /** Every operator process started for this cluster, oldest first. */
  readonly processes: OperatorProcess[] = [];
  private readonly logger: Logger;

  constructor(readonly options: SimClusterOptions) {
    this.logger = options.logger ?? silentLogger;
    this.model = new ClusterModel(
      { nodes: 3, gpusPerNode: 4, seed: hash(options.name), ...options.shape, name: options.name },
      {
        timers: { now: () => Date.now(), schedule: (fn, ms) => cancellable(fn, ms) },
        replicaStartMs: options.replicaStartMs ?? 150,
        stepMs: options.stepMs ?? 60,
      },
    );
  }

  get name(): string {
    return this.options.name;
  }

  /** The operator process currently attached (the newest one not stopped). */
  get operator(): OperatorProcess | null {
    const p = this.processes[this.processes.length - 1];
    return p && !p.stopped ? p : null;
  }

  /** Processes started and not stopped (more than one only during an overlapping start). */
  get running(): OperatorProcess[] {
    return this.processes.filter((p) => !p.stopped);
  }

  get client(): OperatorClient {
    const p = this.operator;
    if (!p) throw new Error(`${this.name}: no operator running`);
    return p.client;
  }

  /**
   * Start an operator process for this cluster: a new `OperatorClient` that reports this model
   * and applies desired state and operations to it. The model re-reports everything on attach,
   * as an operator's informers re-list on start.
   */
  async startOperator(opts: {
    hubUrl: string;
    token: string;
    storage: Storage;
    tuning?: ClientTuning;
    /**
     * Start while the current process still runs (a rolling update: two replicas of the
     * operator for one cluster). The new one takes over the model's reports; the old one keeps
     * its connection until the hub displaces it. Give it storage of its own.
     */
    overlap?: boolean;
  }): Promise<OperatorProcess> {
    if (this.operator && !opts.overlap) throw new Error(`${this.name}: an operator is already running; stop or crash it first`);
    let cursorStore: CursorStore;
    let outboundLog: OutboundLog | undefined;
    if (opts.storage.kind === 'files') {
      const stores = await openFileStores(opts.storage.dir);
      cursorStore = stores.cursorStore;
      outboundLog = stores.outboundLog;
    } else if (opts.storage.kind === 'memory') {
      cursorStore = opts.storage.cursorStore;
    } else {
      cursorStore = new MemoryCursorStore();
    }
    const timers = new FreezableTimers();
    const m = this.model;
    const { operatorVersion, ...tuning } = opts.tuning ?? {};
    const client = new OperatorClient({
      url: opts.hubUrl,
      token: opts.token,
      clusterId: this.name,
      operatorVersion: operatorVersion ?? 'dev',
      cursorStore,
      ...(outboundLog ? { outboundLog } : {}),
      logger: this.logger.child({ cluster: this.name, process: this.processes.length + 1 }),
      timers,
      dial: this.tap.dialer(),
      snapshot: () => m.snapshot(),
      ...tuning,
      handlers: {
        desired: (payload) => {
          m.applyDesired(payload);
          return applied();
        },
        pruneDesired: (keep) => {
          m.prune(keep);
          return applied();
        },
        operation: async (payload, ctx) => {
          this.operationRuns.set(payload.operation_id, (this.operationRuns.get(payload.operation_id) ?? 0) + 1);
          return m.runOperation(payload, ctx);
        },
      },
    });
    const proc: OperatorProcess = { client, timers, token: opts.token, stateDir: opts.storage.kind === 'files' ? opts.storage.dir : null, stopped: false };
    this.processes.push(proc);
    this.model.attach({
      cluster: (p) => client.reportCluster(p),
      node: (p) => client.reportNode(p),
      device: (p) => client.reportDevice(p),
      deployment: (p) => client.reportDeployment(p),
      deploymentRemoved: (id) => client.removeDeployment(id),
      event: (kind, e) => {
        this.eventsEmitted++;
        client.emitEvent(kind, e);
      },
    });
    await client.start();
    return proc;
  }

  /** A graceful (or not) stop of the current process through the SDK's own `stop()`. */
  async stopOperator(options: { graceful?: boolean; timeoutMs?: number } = {}): Promise<void> {
    const p = this.operator;
    if (p) await this.stopProcess(p, options);
  }

  /** Stop one process (e.g. an older one an overlapping start displaced). */
  async stopProcess(p: OperatorProcess, options: { graceful?: boolean; timeoutMs?: number } = {}): Promise<void> {
    if (p.stopped) return;
    // Only the newest process has the model's reports; an older one never got them back.
    if (p === this.operator) this.model.detach();
    p.stopped = true;
    await p.client.stop(options);
  }

  /**
   * A crash: the process stops existing without `stop()`. Nothing more is saved, no close frame
   * is sent by the SDK; the caller cuts the connection at the network (the link proxy) so the
   * hub sees the socket die as it would with a killed pod. Returns after a short grace so that
   * I/O already in flight (an fsync, a rename) lands before another process opens the same files,
   * as it would before a real restart.
   */
  async crashOperator(cutNetwork: () => void): Promise<void> {
    const p = this.operator;
    if (!p) return;
    p.timers.freeze();
    this.model.detach();
    p.stopped = true;
    // The state directory's lock stays behind, naming this (still running) pid, as a killed
    // process's does; the restart takes it over as a process given the same pid in its namespace would.
    if (p.stateDir) abandonFileStoresLock(p.stateDir);
    cutNetwork();
    await new Promise((r) => setTimeout(r, 250));
  }

  /** An event from the cluster, outside the model (a flood); counted like the model's own. */
  emitEvent(kind: 'node' | 'device' | 'deployment', e: { subject: string; reason: string; message: string; severity: 'info' | 'warning' | 'error' }): void {
    const p = this.operator;
    if (!p) return;
    this.eventsEmitted++;
    p.client.emitEvent(kind, e);
  }

  /** Drop the model's timers too (end of a test). */
  dispose(): void {
    this.model.detach();
  }
}

function cancellable(fn: () => void, ms: number): () => void {
  const t = setTimeout(fn, ms);
  return () => clearTimeout(t);
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}
