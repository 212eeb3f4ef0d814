import { OperatorClient, type OperatorClientOptions } from '../../../../src/operator/client';
import { MemoryCursorStore, type CursorStore } from '../../../../src/operator/cursor-store';
import { applied, type FrameContext, type HandlerResult, type OperatorHandlers } from '../../../../src/operator/handlers';
import { memoryLogger } from '../../../../src/operator/logger';
import { MemoryOutboundLog } from '../../../../src/operator/outbound-log';
import type { ObservedSnapshot } from '../../../../src/operator/resync';
import type { Payload } from '../../../../src/protocol';
import { ManualTimers } from './manual-timers';
import { eventually, type HubConnection, type ScriptedHub } from './scripted-hub';

export const SNAPSHOT: ObservedSnapshot = {
  cluster: { kubernetes_version: '1.30.2', provider: 'on-prem', region: 'lab', labels: {} },
  nodes: [
    {
      node_id: 'node-a',
      name: 'node-a',
      ready: true,
      schedulable: true,
      labels: {},
      taints: [],
      allocatable: { gpus: 1, cpu_millis: 8000, memory_mb: 65536 },
    },
  ],
  devices: [
    {
      device_id: 'GPU-00000000-0000-0000-0000-000000000001',
      node_id: 'node-a',
      vendor: 'nvidia',
      model: 'H100',
      memory_total_mb: 81920,
      health: 'healthy',
      driver_version: '550.54',
    },
  ],
  deployments: [],
};

export function desiredPayload(id: string, revision = 1, overrides: Partial<Payload<'deployment.desired'>> = {}): Payload<'deployment.desired'> {
  return {
    deployment_id: id,
    workload_id: 'w1',
    revision,
    min_replicas: 1,
    max_replicas: 2,
    serving: {
      engine: 'vllm',
      model: 'meta/llama',
      image: 'vllm/vllm-openai:latest',
      args: [],
      env: {},
      gpus_per_replica: 1,
      gpu_model: null,
      port: 8000,
    },
    deleted: false,
    ...overrides,
  };
}

export interface Calls {
  desired: { payload: Payload<'deployment.desired'>; ctx: FrameContext }[];
  prunes: ReadonlySet<string>[];
  operations: Payload<'operation.start'>[];
}

export interface TestClient {
  client: OperatorClient;
  timers: ManualTimers;
  store: CursorStore;
  logger: ReturnType<typeof memoryLogger>;
  calls: Calls;
}

export function makeClient(
  hub: ScriptedHub,
  options: Omit<Partial<OperatorClientOptions>, 'handlers' | 'timers'> & {
    timers?: ManualTimers;
    desiredResult?: (payload: Payload<'deployment.desired'>, ctx: FrameContext) => HandlerResult | Promise<HandlerResult>;
    handlers?: Partial<OperatorHandlers>;
  } = {},
): TestClient {
  const timers = options.timers ?? new ManualTimers();
  const store = options.cursorStore ?? new MemoryCursorStore();
  const logger = memoryLogger();
  const calls: Calls = { desired: [], prunes: [], operations: [] };
  const handlers: OperatorHandlers = {
    desired: (payload, ctx) => {
      calls.desired.push({ payload, ctx });
      return options.desiredResult ? options.desiredResult(payload, ctx) : applied();
    },
    pruneDesired: (keep) => {
      calls.prunes.push(keep);
      return applied();
    },
    operation: (payload) => {
      calls.operations.push(payload);
      return { outcome: 'succeeded', message: 'done' };
    },
    ...options.handlers,
  };
  const { desiredResult: _d, handlers: _h, timers: _t, ...rest } = options;
  const client = new OperatorClient({
    url: hub.url,
    token: 'wsmet_test',
    clusterId: 'c1',
    operatorVersion: '0.1.0',
    snapshot: () => SNAPSHOT,
    random: () => 0.5,
    ...rest,
    cursorStore: store,
    handlers,
    timers,
    logger,
  });
  return { client, timers, store, logger, calls };
}

/** Read frames until the SDK's observed resync stream has ended; returns them in order. */
/**
 * A client started against `hub` (kept in `clients` for the file's teardown), welcomed into
 * session S1 and through the hub's resync of its observed state.
 */
export async function openWelcomed(
  hub: ScriptedHub,
  clients: TestClient[],
  options: Parameters<typeof makeClient>[1] = {},
): Promise<{ t: TestClient; conn: HubConnection }> {
  const t = makeClient(hub, options);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1' });
  await readResync(conn);
  return { t, conn };
}

export async function readResync(conn: HubConnection): Promise<{ begin: import('./scripted-hub').SeenFrame; body: import('./scripted-hub').SeenFrame[]; end: import('./scripted-hub').SeenFrame; others: import('./scripted-hub').SeenFrame[] }> {
  const others = [];
  let begin = await conn.next();
  while (begin.type !== 'resync.begin') {
    others.push(begin);
    begin = await conn.next();
  }
  const body = [];
  for (;;) {
    const f = await conn.next();
    if (f.type === 'stream.end' && f.reply_to === begin.id) return { begin, body, end: f, others };
    if (f.reply_to === begin.id) body.push(f);
    else others.push(f);
  }
}

/** Acknowledge everything the SDK sent so far on this connection. */
export function ackAll(conn: HubConnection): number {
  let max = 0;
  for (const f of conn.frames) if (f.seq !== null && f.seq > max) max = f.seq;
  conn.send('ack', {}, { ack: max });
  return max;
}

/** Wait until the client's contiguous cursor reaches `n`. */
export function cursorReaches(t: TestClient, n: number): Promise<true> {
  return eventually(() => t.client.session.cursor >= n, `cursor ${n}`);
}

/**
 * Wait for the client to notice a lost link and start its backoff, then let the backoff pass.
 * Noticing takes real time (the link's close on real sockets): on CI's loaded machine (six test
 * workers on two cores) one took over 5 s, so the wait is longer than the usual one.
 */
export async function reconnectAfterBackoff(t: TestClient): Promise<void> {
  await eventually(() => t.client.state === 'waiting', 'the client to start its backoff', 12_000);
  const wait = t.client.session.nextReconnectInMs;
  t.timers.advance(wait ?? 0);
}

/** An in-memory outbound log whose syncs can be held (a slow fsync). */
export class SlowOutboundLog extends MemoryOutboundLog {
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  held = 0;
  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }
  release(): void {
    this.open?.();
    this.gate = null;
  }
  override async sync(): Promise<void> {
    if (this.gate) {
      this.held++;
      await this.gate;
    }
  }
}
