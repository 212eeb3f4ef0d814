import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { memoryLogger } from '../../../src/operator/logger';
import { SimulatedCluster } from '../../../src/operator/sim/cluster';
import { newId } from '../../../src/protocol';
import { desiredPayload, readResync } from './support/harness';
import { ManualTimers } from './support/manual-timers';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const sims: SimulatedCluster[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-sim-'));
});
afterEach(async () => {
  for (const s of sims.splice(0)) await s.stop({ graceful: false });
  await hub.stop();
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

async function sim(timers: ManualTimers, stateDir?: string) {
  const s = await SimulatedCluster.create({
    hubUrl: hub.url,
    token: 'wsmet_x',
    clusterId: 'sim-1',
    shape: { nodes: 2, gpusPerNode: 2, seed: 1 },
    logger: memoryLogger(),
    timers,
    replicaStartMs: 1_000,
    stepMs: 10,
    ...(stateDir ? { stateDir } : {}),
  });
  sims.push(s);
  await s.start();
  return s;
}

describe('simulated cluster over the SDK', () => {
  it('streams its nodes and GPUs on a fresh session, renders desired deployments and runs operations', async () => {
    const timers = new ManualTimers();
    const s = await sim(timers);
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    const { body, end } = await readResync(conn);
    expect(body.filter((f) => f.type === 'device.observed')).toHaveLength(4);
    expect(end.payload).toMatchObject({ complete: true, count: body.length });

    conn.sendSeq('deployment.desired', desiredPayload('d1', 1, { min_replicas: 3, max_replicas: 4 }));
    const observed = await conn.seen((f) => f.type === 'deployment.observed' && (f.payload.replica_ids as string[]).length === 3, 'three replicas');
    expect(observed.payload).toMatchObject({ deployment_id: 'd1', observed_revision: 1, phase: 'progressing' });
    timers.advance(1_000);
    await conn.seen((f) => f.type === 'deployment.observed' && f.payload.phase === 'ready' && f.payload.ready_replicas === 3, 'ready');

    const op = newId();
    const start = conn.sendSeq('operation.start', { operation_id: op, kind: 'node.cordon', target: 'node-001', params: {}, deadline: new Date(timers.now() + 60_000).toISOString() });
    const result = await conn.seen((f) => f.type === 'operation.result', 'the result');
    expect(result).toMatchObject({ reply_to: start.id, payload: { operation_id: op, outcome: 'succeeded' } });
    await conn.seen((f) => f.type === 'node.observed' && f.payload.node_id === 'node-001' && f.payload.schedulable === false, 'cordoned node');
    expect(s.model.summary().replicas).toBe(3);
  });

  it('with a state dir, a graceful restart resumes the session with its deployments intact', async () => {
    const timers = new ManualTimers();
    const first = await sim(timers, dir);
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    conn.sendSeq('deployment.desired', desiredPayload('d1', 1, { min_replicas: 2, max_replicas: 2 }));
    await conn.seen((f) => f.type === 'deployment.observed', 'observed');
    await eventually(() => first.client.session.cursor === 1, 'applied');
    // The hub acknowledges everything it got, whenever the SDK writes more.
    const ackLoop = setInterval(() => {
      const max = Math.max(0, ...conn.frames.map((f) => f.seq ?? 0));
      if (!conn.closed) conn.send('ack', {}, { ack: max });
    }, 5);
    await first.stop({ graceful: true });
    clearInterval(ackLoop);
    expect((await conn.waitClosed()).code).toBe(1000);

    const second = await sim(timers, dir);
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', resume_from: 1, lossy: false });
    expect(second.model.deploymentIds).toEqual(['d1']);
    expect(second.model.summary().replicas).toBe(2);
  });
});
