/**
 * Poison frames in the middle of a stream, made from real frames on the wire (the tap rewrites a
 * frame's payload and keeps its envelope, seq and id). Spec: "A permanently unappliable frame is
 * therefore accepted, discarded, and logged loudly, exactly as an unknown type is. The receiver
 * counts the seq, acks it, and records the rejection ... one dropped observation is a stale row
 * until the next resync, while a wedged stream is a cluster that has stopped being managed."
 */
import { describe, expect, it } from 'vitest';
import type { Payload } from '../../src/protocol';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import type { SimCluster } from './support/sim-cluster';
import type { WireFrame } from './support/wire-tap';

const e = useE2E();

/** The same frame text with its payload rewritten. */
function rewrite(text: string, fn: (payload: Record<string, unknown>, frame: Record<string, unknown>) => void): string {
  const f = JSON.parse(text) as Record<string, unknown>;
  fn(f.payload as Record<string, unknown>, f);
  return JSON.stringify(f);
}

/** A cordon done at the cluster (kubectl), not asked for by the plane: node.observed + node.event. */
async function cordonLocally(sim: SimCluster, nodeId: string): Promise<void> {
  await sim.model.runOperation(
    { operation_id: '01J00000000000000000000000', kind: 'node.cordon', target: nodeId, params: {}, deadline: new Date(Date.now() + 60_000).toISOString() },
    { operationId: 'local', startId: 'local', deadline: Date.now() + 60_000, signal: new AbortController().signal, progress: () => {} },
  );
}

async function started(prefix: string) {
  const reg = await e.register(prefix);
  const sim = e.cluster(reg.name);
  await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
  await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
  const target = { uid: reg.uid, cluster: sim, operationsRunOnce: true };
  await converge(e.query, target);
  return { reg, sim, target };
}

describe('poison frames in the middle of a stream', () => {
  it('operator → hub: a frame that violates its schema is acked, dropped and recorded; the frames behind it apply; the stale row heals at the next resync', async () => {
    const { reg, sim, target } = await started('poison-up');
    const session = String(sim.client.session.sessionId);
    const sentBefore = Math.max(...(sim.tap.sessions.get(session)?.sent.keys() ?? [0]));
    let poisoned: WireFrame | null = null;
    sim.tap.onceOut((f, text) => {
      if (f.type !== 'node.observed' || f.reply_to !== null || f.payload.node_id !== 'node-002') return undefined;
      poisoned = f;
      return rewrite(text, (p) => {
        p.taints = [{ key: 'node.kubernetes.io/unschedulable', effect: 'Bogus' }];
      });
    });
    await cordonLocally(sim, 'node-002');
    await cordonLocally(sim, 'node-003');
    const after = await until('the frame after the poisoned one to be sent', () =>
      [...(sim.tap.sessions.get(session)?.sent.values() ?? [])].find((f) => f.seq > sentBefore && f.type === 'node.observed' && f.payload.node_id === 'node-003'),
    );
    await until('the hub to acknowledge past the poison frame', () => (sim.tap.sessions.get(session)?.acked ?? 0) >= after.seq);
    const p = poisoned as WireFrame | null;
    expect(p).not.toBeNull();
    expect(p?.seq).toBeLessThan(after.seq);

    const rejections = await e.query<{ session_id: string; seq: string; frame_id: string; type: string; reason: string }>(
      'select session_id, seq, frame_id, type, reason from rejections where cluster_uid = $1',
      [reg.uid],
    );
    expect(rejections).toEqual([expect.objectContaining({ session_id: session, frame_id: p?.id, type: 'node.observed' })]);
    expect(Number(rejections[0]?.seq)).toBe(p?.seq);
    const nodes = await e.query<{ node_id: string; schedulable: boolean }>('select node_id, schedulable from nodes where cluster_uid = $1 order by node_id', [reg.uid]);
    // The poisoned observation is a stale row; the one after it applied; nothing was wedged or closed.
    expect(nodes.map((n) => [n.node_id, n.schedulable])).toEqual([
      ['node-001', true],
      ['node-002', true],
      ['node-003', false],
    ]);
    expect(sim.tap.links).toHaveLength(1);

    // The next resync heals it.
    sim.client.resync();
    await converge(e.query, target);
    expect(sim.tap.links).toHaveLength(1);
  });

  it('a poison frame inside the operator\'s snapshot makes it incomplete: nothing is pruned against it; the next complete snapshot prunes', async () => {
    const { reg, sim, target } = await started('poison-snap');
    await e.query(
      `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
       values ($1, 'node-gone', 'node-gone', true, true, '{}', '[]', 8, 1000, 1000, 'an-older-session', 1)`,
      [reg.uid],
    );
    let poisoned: WireFrame | null = null;
    sim.tap.onceOut((f, text) => {
      if (f.type !== 'device.observed' || f.reply_to === null) return undefined;
      poisoned = f;
      return rewrite(text, (p) => {
        p.memory_total_mb = -1;
      });
    });
    sim.client.resync();
    const session = String(sim.client.session.sessionId);
    await until('the snapshot to be sent and acknowledged', () => {
      const s = sim.tap.sessions.get(session);
      const end = [...(s?.sent.values() ?? [])].find((f) => f.type === 'stream.end' && f.replyTo === (poisoned as WireFrame | null)?.reply_to);
      return end !== undefined && (s?.acked ?? 0) >= end.seq;
    });
    const gone = await e.query('select node_id from nodes where cluster_uid = $1 and node_id = $2', [reg.uid, 'node-gone']);
    expect(gone).toHaveLength(1);
    const rej = await e.query<{ type: string }>('select type from rejections where cluster_uid = $1', [reg.uid]);
    expect(rej.map((r) => r.type)).toEqual(['device.observed']);

    sim.client.resync();
    await converge(e.query, target);
    expect(await e.query('select node_id from nodes where cluster_uid = $1 and node_id = $2', [reg.uid, 'node-gone'])).toEqual([]);
  });

  it('an unknown type from the operator is never fatal: the hub answers with an error naming it (retryable false) and the stream continues', async () => {
    const { sim, target } = await started('poison-unknown');
    const errors: Payload<'error'>[] = [];
    sim.client.on('hubError', ({ payload }) => errors.push(payload));
    sim.tap.onceOut((f, text) => {
      if (f.type !== 'node.event') return undefined;
      return rewrite(text, (_p, frame) => {
        frame.type = 'node.future_event';
      });
    });
    await cordonLocally(sim, 'node-001');
    await until('the hub to answer the unknown type', () => errors.length > 0);
    expect(errors[0]).toMatchObject({ retryable: false, unknown_type: 'node.future_event' });
    await cordonLocally(sim, 'node-002');
    await converge(e.query, target);
    expect(sim.tap.links).toHaveLength(1);
  });

  it('hub → operator: a desired frame that breaks its invariant (min above max) is acked, dropped and answered; the next desired change applies', async () => {
    const { reg, sim, target } = await started('poison-down');
    let poisoned: WireFrame | null = null;
    sim.tap.onceIn((f, text) => {
      if (f.type !== 'deployment.desired') return undefined;
      poisoned = f;
      return rewrite(text, (p) => {
        p.min_replicas = 9;
        p.max_replicas = 1;
      });
    });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 3, max_replicas: 3 }));
    await until('the SDK to drop the poison frame', () => sim.client.stats.poisonFrames === 1);
    const p = poisoned as WireFrame | null;
    // The SDK answered it with an error replying to it, and acknowledged it.
    await until('the answer to be sent', () => [...sim.tap.sentFrames()].some((f) => f.type === 'error' && f.replyTo === p?.id));
    const answer = [...sim.tap.sentFrames()].find((f) => f.type === 'error' && f.replyTo === p?.id);
    expect(answer?.payload).toMatchObject({ code: 'invalid', retryable: false });
    await until('the SDK to acknowledge past it', () => sim.client.session.durableCursor >= (p?.seq ?? Infinity));
    // Nothing was applied from it: the cluster still runs the previous bounds.
    expect(sim.model.toJSON().deployments.map((d) => [d.desired.min_replicas, d.desired.max_replicas])).toEqual([[2, 2]]);
    await sleep(200);
    expect(sim.tap.links).toHaveLength(1);

    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 3, max_replicas: 4 }));
    await converge(e.query, target);
    expect(sim.model.toJSON().deployments.map((d) => [d.desired.min_replicas, d.desired.max_replicas, d.replicas.length])).toEqual([[3, 4, 3]]);
  });
});
