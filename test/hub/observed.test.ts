import { describe, expect, it } from 'vitest';
import { RFC3339_RE } from '../../src/protocol/envelope';
import { node, useHub } from './support/hub';

const h = useHub();

const device = (id: string, nodeId = 'n1') => ({
  device_id: id,
  node_id: nodeId,
  vendor: 'nvidia',
  model: 'NVIDIA A100-SXM4-80GB',
  memory_total_mb: 81920,
  health: 'healthy' as const,
  driver_version: '550.54.15',
});

const deployment = (id: string, replicas: string[], ready = replicas.length) => ({
  deployment_id: id,
  observed_revision: 3,
  phase: 'ready' as const,
  ready_replicas: ready,
  replica_ids: replicas,
  message: '',
});

describe('observed state in (spec: Supply, Demand operator → hub)', () => {
  it('every observed kind lands in Postgres, keyed by cluster first', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('cluster.observed', { kubernetes_version: 'v1.31.2', provider: 'gke', region: 'us-east4', labels: { tier: 'prod' } });
    peer.send('node.observed', node('n1'));
    peer.send('device.observed', device('GPU-1'));
    peer.send('deployment.observed', deployment('d1', ['d1-a', 'd1-b']));
    await peer.ackedThrough(4);
    expect(await h.sql('select kubernetes_version, provider, region, labels from observed_clusters where cluster_uid = $1', [c.uid])).toEqual([
      { kubernetes_version: 'v1.31.2', provider: 'gke', region: 'us-east4', labels: { tier: 'prod' } },
    ]);
    expect(await h.sql('select node_id, ready, gpus, cpu_millis, memory_mb from nodes where cluster_uid = $1', [c.uid])).toEqual([
      { node_id: 'n1', ready: true, gpus: '8', cpu_millis: '64000', memory_mb: '512000' },
    ]);
    expect(await h.sql('select device_id, node_id, memory_total_mb, health from devices where cluster_uid = $1', [c.uid])).toEqual([
      { device_id: 'GPU-1', node_id: 'n1', memory_total_mb: '81920', health: 'healthy' },
    ]);
    expect(await h.sql('select replica_id from replicas where cluster_uid = $1 order by replica_id', [c.uid])).toEqual([
      { replica_id: 'd1-a' },
      { replica_id: 'd1-b' },
    ]);
    peer.close();
  });

  it('every field of every observed row is stored in its own column, as sent (no field lands in another)', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    // Every value distinct from its neighbours, text that needs escaping, a null where one is allowed.
    const n = {
      node_id: 'node-a',
      name: 'Node "A" é😀',
      ready: true,
      schedulable: false,
      labels: { 'topology.kubernetes.io/zone': 'us-east4-a', quote: 'a"b\\c' },
      taints: [
        { key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' as const },
        { key: 'maintenance', effect: 'NoExecute' as const },
      ],
      allocatable: { gpus: 7, cpu_millis: 94_000, memory_mb: 1_376_256 },
    };
    const d = { device_id: 'GPU-a', node_id: 'node-a', vendor: 'nvidia', model: 'A100 "SXM4"', memory_total_mb: 81_920, health: 'degraded' as const, driver_version: '550.54.15\n' };
    const dep1 = { deployment_id: 'dep-a', observed_revision: 9_007_199_254_740_991, phase: 'progressing' as const, ready_replicas: 1, replica_ids: ['dep-a-1', 'dep-a-2'], message: 'rolling ✓ "2/3"' };
    const dep2 = { deployment_id: 'dep-b', observed_revision: null, phase: 'pending' as const, ready_replicas: 0, replica_ids: [], message: '' };
    const ev = { subject: 'node-a', reason: 'NodeNotReady', message: 'kubelet\tstopped', severity: 'error' as const, occurred_at: '2026-08-19T14:02:10.913+02:00' };
    peer.send('node.observed', n);
    peer.send('device.observed', d);
    peer.send('deployment.observed', dep1);
    peer.send('deployment.observed', dep2);
    const evId = peer.send('node.event', ev);
    await peer.ackedThrough(5);
    const { allocatable: _, ...nodeFields } = n;
    expect(
      await h.sql('select node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq from nodes where cluster_uid = $1', [c.uid]),
    ).toEqual([{ ...nodeFields, gpus: '7', cpu_millis: '94000', memory_mb: '1376256', obs_session: sessionId, obs_seq: '1' }]);
    expect(await h.sql('select device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq from devices where cluster_uid = $1', [c.uid])).toEqual([
      { ...d, memory_total_mb: '81920', obs_session: sessionId, obs_seq: '2' },
    ]);
    expect(
      await h.sql('select deployment_id, observed_revision, phase, ready_replicas, message, obs_session, obs_seq from observed_deployments where cluster_uid = $1 order by 1', [c.uid]),
    ).toEqual([
      { deployment_id: 'dep-a', observed_revision: '9007199254740991', phase: 'progressing', ready_replicas: 1, message: dep1.message, obs_session: sessionId, obs_seq: '3' },
      { deployment_id: 'dep-b', observed_revision: null, phase: 'pending', ready_replicas: 0, message: '', obs_session: sessionId, obs_seq: '4' },
    ]);
    expect(await h.sql('select deployment_id, replica_id from replicas where cluster_uid = $1 order by 1, 2', [c.uid])).toEqual([
      { deployment_id: 'dep-a', replica_id: 'dep-a-1' },
      { deployment_id: 'dep-a', replica_id: 'dep-a-2' },
    ]);
    const events = await h.sql<{ occurred_at: string }>(
      `select frame_id, kind, subject, reason, message, severity, to_json(occurred_at)#>>'{}' as occurred_at, session_id, seq from events where cluster_uid = $1`,
      [c.uid],
    );
    expect(events).toEqual([{ frame_id: evId, kind: 'node', ...ev, occurred_at: expect.any(String), session_id: sessionId, seq: '5' }]);
    expect(Date.parse(events[0]!.occurred_at)).toBe(Date.parse(ev.occurred_at));
    peer.close();
  });

  it('ack means applied: when an ack covers a frame, its row is already committed', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    for (let i = 1; i <= 50; i++) peer.send('node.observed', node(`n${i}`));
    await peer.ackedThrough(1);
    const acked = peer.lastAck() as number;
    const rows = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]);
    expect(Number(rows[0]?.n)).toBeGreaterThanOrEqual(acked);
    peer.close();
  });

  it('deployment.observed names the whole replica set: replicas it does not name are deleted', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('deployment.observed', deployment('d1', ['r1', 'r2', 'r3']));
    peer.send('deployment.observed', deployment('d2', ['x1']));
    await peer.ackedThrough(2);
    peer.send('deployment.observed', deployment('d1', ['r2', 'r4'], 1));
    await peer.ackedThrough(3);
    const rows = await h.sql('select deployment_id, replica_id from replicas where cluster_uid = $1 order by 1, 2', [c.uid]);
    expect(rows).toEqual([
      { deployment_id: 'd1', replica_id: 'r2' },
      { deployment_id: 'd1', replica_id: 'r4' },
      { deployment_id: 'd2', replica_id: 'x1' },
    ]);
    peer.close();
  });

  it('the last statement about a subject in a batch wins (observed then removed in one burst)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1', true));
    peer.send('node.observed', node('n1', false));
    peer.send('node.observed', node('n2'));
    peer.send('node.removed', { node_id: 'n2' });
    await peer.ackedThrough(4);
    expect(await h.sql('select node_id, ready from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n1', ready: false }]);
    peer.close();
  });

  it('a node, GPU or deployment that is gone is removed outside a resync by <kind>.removed', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    peer.send('device.observed', device('GPU-1'));
    peer.send('deployment.observed', deployment('d1', ['r1']));
    await peer.ackedThrough(3);
    peer.send('node.removed', { node_id: 'n1' });
    peer.send('device.removed', { device_id: 'GPU-1' });
    peer.send('deployment.removed', { deployment_id: 'd1' });
    await peer.ackedThrough(6);
    for (const table of ['nodes', 'devices', 'observed_deployments', 'replicas']) {
      expect(await h.sql(`select 1 from ${table} where cluster_uid = $1`, [c.uid]), table).toEqual([]);
    }
    peer.close();
  });

  it('unknown payload fields are ignored and never stored (state, not measurement)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('device.observed', { ...device('GPU-1'), utilization: 0.97, temperature_c: 81, memory_used_mb: 70000 } as ReturnType<typeof device>);
    await peer.ackedThrough(1);
    const [row] = await h.sql('select * from devices where cluster_uid = $1', [c.uid]);
    expect(Object.keys(row ?? {}).sort()).toEqual(
      ['cluster_uid', 'device_id', 'driver_version', 'health', 'memory_total_mb', 'model', 'node_id', 'obs_seq', 'obs_session', 'updated_at', 'vendor'].sort(),
    );
    expect(JSON.stringify(row)).not.toMatch(/0\.97|70000/);
    peer.close();
  });

  it('events are appended once: a replayed event (same frame id) is not stored twice', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const ev = { subject: 'n1', reason: 'NodeNotReady', message: 'kubelet stopped', severity: 'warning' as const, occurred_at: new Date().toISOString() };
    const id = peer.send('node.event', ev);
    await peer.ackedThrough(1);
    peer.close();
    await peer.closed;
    // The operator lost the ack and replays the same frame under the same session.
    const again = await h.connect(c.token, sessionId);
    await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    again.send('node.event', ev, { seq: 2, id });
    again.send('node.event', { ...ev, reason: 'NodeReady' }, { seq: 3 });
    await again.ackedThrough(3);
    const rows = await h.sql<{ reason: string }>('select reason from events where cluster_uid = $1 order by received_at', [c.uid]);
    expect(rows.map((r) => r.reason)).toEqual(['NodeNotReady', 'NodeReady']);
    again.close();
  });

  it('an event at any RFC 3339 time is stored at its instant, to the microsecond, not rejected as poison: offsets past ±15:59 (beyond what timestamptz reads), the ends of the calendar, leap seconds', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // [occurred_at, the instant in UTC as Postgres writes it]. Before, an offset time went through
    // a JS Date: the ends of the calendar became years 0000 and +010000 (22008) and the
    // microseconds were cut; and a leap second was no RFC 3339 time at all (Date.parse).
    const cases: [string, string][] = [
      ['2026-01-01T00:00:00+16:00', '2025-12-31T08:00:00.000000'],
      ['0001-01-01T00:30:00-01:00', '0001-01-01T01:30:00.000000'],
      ['0001-01-01T23:30:00+23:00', '0001-01-01T00:30:00.000000'],
      ['9999-12-31T23:30:00+01:00', '9999-12-31T22:30:00.000000'],
      ['9999-12-31T00:30:00-23:00', '9999-12-31T23:30:00.000000'],
      ['2020-01-01T01:00:00.123456+01:00', '2020-01-01T00:00:00.123456'],
      ['2020-01-01T20:00:00.123456+20:00', '2020-01-01T00:00:00.123456'],
      ['2016-12-31T23:59:60Z', '2017-01-01T00:00:00.000000'],
      ['2016-12-31T15:59:60-08:00', '2017-01-01T00:00:00.000000'],
      ['2017-01-01T19:59:60.5+20:00', '2017-01-01T00:00:00.500000'],
      ['2020-01-01t00:00:00.25z', '2020-01-01T00:00:00.250000'],
      // A real leap second has a fraction in UTC: Postgres refuses 23:59:60.x as written (22008).
      ['2016-12-31T23:59:60.5Z', '2017-01-01T00:00:00.500000'],
      ['2016-12-31T23:59:60.25+00:00', '2017-01-01T00:00:00.250000'],
      // Past microseconds the fraction is cut, not rounded: rounded, the last instant of 9999 was
      // stored in year 10000 and read back as no RFC 3339 time.
      ['9999-12-31T23:59:59.9999999Z', '9999-12-31T23:59:59.999999'],
      ['2020-01-01T00:00:00.1234567+01:00', '2019-12-31T23:00:00.123456'],
    ];
    cases.forEach(([occurred_at], i) => peer.send('node.event', { subject: `n${i}`, reason: 'Edge', message: '', severity: 'info', occurred_at }));
    await peer.ackedThrough(cases.length, 10_000);
    expect(await h.sql('select reason from rejections where cluster_uid = $1', [c.uid])).toEqual([]);
    const rows = await h.sql<{ subject: string; at: string }>(
      `select subject, to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || case when occurred_at < '0001-01-01Z' then ' BC' else '' end as at
       from events where cluster_uid = $1`,
      [c.uid],
    );
    const stored = Object.fromEntries(rows.map((r) => [r.subject, r.at]));
    expect(cases.map(([t], i) => [t, stored[`n${i}`]])).toEqual(cases);
    // And the admin API answers each at the same instant, as an RFC 3339 time in UTC.
    const read = await h.admin('GET', `/clusters/${c.name}/events?limit=100`);
    const answered = Object.fromEntries((read.json as { items: { subject: string; occurred_at: string }[] }).items.map((e) => [e.subject, e.occurred_at]));
    for (const [i, [sent, utc]] of cases.entries()) {
      const got = answered[`n${i}`] as string;
      expect([sent, got, RFC3339_RE.test(got), Date.parse(got)]).toEqual([sent, got, true, Date.parse(`${utc}Z`)]);
    }
    peer.close();
  });

  it('link drop counters reach the hub (link.stats) and show in the admin API', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('link.stats', { epoch: '01J9WZY0000000000000000000', dropped_events: 12, evicted_frames: 3, replaced_frames: 840 });
    await peer.ackedThrough(1);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.link).toMatchObject({ epoch: '01J9WZY0000000000000000000', dropped_events: 12, evicted_frames: 3, replaced_frames: 840 });
    peer.close();
  });
});
