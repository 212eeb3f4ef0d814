/**
 * The convergence checker checks itself: a converged cluster, then Postgres is tampered with in
 * each way the invariants forbid, and the checker must say so. Without this, a suite that
 * "converges" could be passing because the checker looks at nothing.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { checkInvariants, converge, diffDesired, diffObserved, readPlane, type ConvergeTarget } from './support/converge';
import { E2E_CLIENT, useE2E } from './support/e2e';
import { desiredBody, type Registered } from './support/plane';
import type { SimCluster } from './support/sim-cluster';

const e = useE2E();
let reg: Registered;
let sim: SimCluster;
let target: ConvergeTarget;

beforeAll(async () => {
  reg = await e.register('checker');
  sim = e.cluster(reg.name);
  await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
  await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 3 }));
  await e.admin.startOperation(reg.name, 'node.cordon', 'node-003');
  target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true };
  await converge(e.query, target);
  // Stop the operator so nothing repairs the tampering behind the checker's back.
  await sim.stopOperator({ graceful: true });
}, 60_000);

async function violations(): Promise<string[]> {
  const plane = await readPlane(e.query, reg.uid);
  return [...diffObserved(plane, sim), ...diffDesired(plane, sim), ...checkInvariants(plane, target)];
}

describe('the convergence checker catches what it promises to', () => {
  it('agrees with an untouched converged plane', async () => {
    const plane = await readPlane(e.query, reg.uid);
    expect([...diffObserved(plane, sim), ...diffDesired(plane, sim)]).toEqual([]);
    expect(checkInvariants(plane, { ...target, exactEvents: false })).toEqual([]);
  });

  it('an event the hub acknowledged and that is not stored is "acked and lost"', async () => {
    const acked = [...sim.tap.events().acked];
    expect(acked.length).toBeGreaterThan(0);
    const [row] = await e.query<{ frame_id: string; kind: string; subject: string; reason: string; message: string; severity: string; occurred_at: string; session_id: string; seq: string }>(
      'delete from events where cluster_uid = $1 and frame_id = $2 returning *',
      [reg.uid, acked[0]],
    );
    try {
      expect((await violations()).join('\n')).toMatch(/acknowledged by the hub are not stored/);
    } finally {
      await e.query(
        'insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, session_id, seq) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
        [reg.uid, row?.frame_id, row?.kind, row?.subject, row?.reason, row?.message, row?.severity, row?.occurred_at, row?.session_id, row?.seq],
      );
    }
  });

  it('a valid frame the hub recorded as rejected is flagged, and an acked event lost that way says so', async () => {
    const acked = [...sim.tap.events().acked];
    const sent = [...sim.tap.sentFrames()].find((f) => f.id === acked[0]);
    expect(sent).toBeDefined();
    const [row] = await e.query<{ frame_id: string; kind: string; subject: string; reason: string; message: string; severity: string; occurred_at: string; session_id: string; seq: string }>(
      'delete from events where cluster_uid = $1 and frame_id = $2 returning *',
      [reg.uid, acked[0]],
    );
    await e.query("insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason) values ($1, $2, $3, $4, $5, 'tampered: said invalid')", [
      reg.uid,
      sent?.session,
      sent?.seq,
      sent?.id,
      sent?.type,
    ]);
    try {
      const found = (await violations()).join('\n');
      expect(found).toMatch(/the hub rejected 1 valid frame\(s\) the operator sent \(e\.g\. [a-z]+\.event [0-9A-Z]{26} at seq \d+: tampered: said invalid\)/);
      expect(found).toMatch(/acknowledged by the hub are not stored .*the hub recorded it as rejected: tampered: said invalid/);
    } finally {
      await e.query('delete from rejections where cluster_uid = $1 and frame_id = $2', [reg.uid, acked[0]]);
      await e.query(
        'insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, session_id, seq) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
        [reg.uid, row?.frame_id, row?.kind, row?.subject, row?.reason, row?.message, row?.severity, row?.occurred_at, row?.session_id, row?.seq],
      );
    }
    expect(await violations()).toEqual([]);
  });

  it('a row pruned that exists in the cluster is "pruned wrongly", and a row no frame wrote is flagged', async () => {
    const [n] = await e.query<Record<string, unknown>>("delete from nodes where cluster_uid = $1 and node_id = 'node-002' returning *", [reg.uid]);
    try {
      const v = (await violations()).join('\n');
      expect(v).toMatch(/node node-002: in the cluster, missing from Postgres/);
      expect(v).toMatch(/node node-002 exists in the cluster but not in Postgres/);
    } finally {
      await e.query(
        `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
        [reg.uid, n?.node_id, n?.name, n?.ready, n?.schedulable, JSON.stringify(n?.labels), JSON.stringify(n?.taints), n?.gpus, n?.cpu_millis, n?.memory_mb, n?.obs_session, n?.obs_seq],
      );
    }
    await e.query("update nodes set obs_seq = 999999 where cluster_uid = $1 and node_id = 'node-001'", [reg.uid]);
    expect((await violations()).join('\n')).toMatch(/node node-001: written by .* a frame no operator of this cluster sent/);
    expect(await violations()).toHaveLength(1);
  });

  it('desired bounds scaled or summed anywhere are a difference: exactly the stored min/max', async () => {
    const plane = await readPlane(e.query, reg.uid);
    expect(diffDesired(plane, sim)).toEqual([]);
    const d1 = plane.desired.get('d1') as Record<string, unknown>;
    d1.max_replicas = 6; // what a receiver that summed or scaled would hold
    expect(diffDesired(plane, sim).join('\n')).toMatch(/desired d1: operator holds .*"max_replicas":3.* Postgres stores .*"max_replicas":6/);
  });

  it('an operation the admin API accepted and that is not stored is flagged (the soak counted it only in a printed figure)', async () => {
    const plane = await readPlane(e.query, reg.uid);
    const stored = plane.operations.map((o) => o.operation_id);
    expect(stored.length).toBeGreaterThan(0);
    const lost = newId();
    // Earlier cases tamper with the plane too: only this check's own lines are looked at.
    const v = checkInvariants(plane, { ...target, exactEvents: false, operationsAccepted: new Set([...stored, lost]) });
    expect(v.filter((x) => x.includes('was accepted'))).toEqual([`operation ${lost} was accepted (202) but is not stored`]);
  });

  it('an operation concluded two ways, or whose handler ran twice, is flagged', async () => {
    const id = newId();
    await e.query(
      `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, concluded_at)
       values ($1, $2, 'node.cordon', 'node-001', '{}', now() + interval '1 hour', 0, 'succeeded', now())`,
      [id, reg.uid],
    );
    await e.query(
      `insert into operation_events (operation_id, frame_id, kind, phase, message, at) values
       ($1, $2, 'result', 'succeeded', '', now() - interval '1 second'), ($1, $3, 'result', 'failed', '', now())`,
      [id, newId(), newId()],
    );
    sim.operationRuns.set(id, 2);
    const v = (await violations()).join('\n');
    expect(v).toMatch(new RegExp(`operation ${id}: concluded more than one way`));
    expect(v).toMatch(new RegExp(`operation ${id}: its handler ran 2 times`));
  });

  it('a stored event no operator sent is "invented"', async () => {
    const id = newId();
    await e.query(
      `insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, session_id, seq)
       values ($1, $2, 'node', 'node-001', 'Tampered', 'never sent', 'info', now(), 'nobody', 1)`,
      [reg.uid, id],
    );
    try {
      expect((await violations()).join('\n')).toMatch(/1 stored event\(s\) were never sent by an operator of this cluster/);
    } finally {
      await e.query('delete from events where cluster_uid = $1 and frame_id = $2', [reg.uid, id]);
    }
  });

  it('a row that says other than the frame that wrote it, or whose frame was about something else, is flagged', async () => {
    const [n] = await e.query<{ name: string; obs_seq: string }>("select name, obs_seq from nodes where cluster_uid = $1 and node_id = 'node-003'", [reg.uid]);
    await e.query("update nodes set name = 'tampered' where cluster_uid = $1 and node_id = 'node-003'", [reg.uid]);
    try {
      expect((await violations()).join('\n')).toMatch(/node node-003: row differs from the frame that wrote it/);
    } finally {
      await e.query("update nodes set name = $2 where cluster_uid = $1 and node_id = 'node-003'", [reg.uid, n?.name]);
    }
    const device = [...sim.tap.sentFrames()].find((f) => f.type === 'device.observed');
    expect(device).toBeDefined();
    await e.query("update nodes set obs_session = $2, obs_seq = $3 where cluster_uid = $1 and node_id = 'node-003'", [reg.uid, device?.session, device?.seq]);
    try {
      expect((await violations()).join('\n')).toMatch(new RegExp(`node node-003: written by seq ${device?.seq}, which was a device.observed about`));
    } finally {
      await e.query("update nodes set obs_seq = $2 where cluster_uid = $1 and node_id = 'node-003'", [reg.uid, n?.obs_seq]);
    }
  });

  it('an operation stored otherwise than its first conclusion and the result the hub acknowledged is flagged', async () => {
    const [op] = await e.query<{ operation_id: string; state: string }>("select operation_id, state from operations where cluster_uid = $1 and kind = 'node.cordon' and target = 'node-003'", [reg.uid]);
    expect(op?.state).toBe('succeeded');
    await e.query("update operations set state = 'failed' where operation_id = $1", [op?.operation_id]);
    try {
      const v = (await violations()).join('\n');
      expect(v).toMatch(new RegExp(`operation ${op?.operation_id}: state failed, but the first conclusion said succeeded`));
      expect(v).toMatch(new RegExp(`operation ${op?.operation_id}: the hub acknowledged result\\(s\\) succeeded but stores failed`));
    } finally {
      await e.query("update operations set state = 'succeeded' where operation_id = $1", [op?.operation_id]);
    }
  });

  it('with exactEvents, an event emitted and neither sent nor counted as dropped is flagged', async () => {
    sim.eventsEmitted++;
    try {
      expect((await violations()).join('\n')).toMatch(/events: \d+ emitted ≠ \d+ sent \+ \d+ dropped and counted/);
    } finally {
      sim.eventsEmitted--;
    }
  });

  it('a frame from the hub that is not a valid catalog message is flagged', async () => {
    sim.tap.invalidFromHub.push('poison: operation.start kind: Invalid option');
    try {
      expect((await violations()).join('\n')).toMatch(/the hub sent a frame that is not a valid catalog message \(poison: operation.start kind/);
    } finally {
      sim.tap.invalidFromHub.pop();
    }
  });
});
