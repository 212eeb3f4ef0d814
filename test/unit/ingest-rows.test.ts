/**
 * The ingest statement reads its row tables positionally (`r->>i`, src/hub/db/ingest.ts): each
 * encoder must put every field at the index its column list gives it, or a value lands in the
 * wrong column (two text columns would even swap without an error).
 */
import { describe, expect, it } from 'vitest';
import { DEPLOYMENT_COLUMNS, DEVICE_COLUMNS, EVENT_COLUMNS, NODE_COLUMNS, deploymentRow, deviceRow, eventRow, nodeRow, utcTime } from '../../src/hub/db/ingest-rows';
import type { IngestBatch } from '../../src/hub/session/ingest-batch';

type Row = Record<string, unknown>;

/** Each field at the index of the column named after it. */
function expectAligned(columns: readonly (readonly [string, string])[], encoded: readonly unknown[], fields: Row): void {
  expect(columns.map(([name]) => name).sort()).toEqual(Object.keys(fields).sort());
  expect(encoded).toHaveLength(columns.length);
  columns.forEach(([name], i) => expect(encoded[i], `${name} at ${i}`).toBe(fields[name]));
}

describe('positional ingest rows', () => {
  it('node rows: every field at its column, allocatable spread into gpus, cpu_millis, memory_mb', () => {
    const n: IngestBatch['nodes'][number] = {
      node_id: 'n1',
      name: 'node one',
      ready: true,
      schedulable: false,
      labels: { a: 'b' },
      taints: [{ key: 'k', effect: 'NoSchedule' }],
      allocatable: { gpus: 8, cpu_millis: 64_000, memory_mb: 512_000 },
      seq: 41,
    };
    const { allocatable, ...rest } = n;
    expectAligned(NODE_COLUMNS, nodeRow(n), { ...rest, ...allocatable });
  });

  it('device rows', () => {
    const d: IngestBatch['devices'][number] = {
      device_id: 'GPU-1',
      node_id: 'n1',
      vendor: 'nvidia',
      model: 'A100',
      memory_total_mb: 81_920,
      health: 'healthy',
      driver_version: '550',
      seq: 7,
    };
    expectAligned(DEVICE_COLUMNS, deviceRow(d), d);
  });

  it('deployment rows', () => {
    const d: IngestBatch['deployments'][number] = {
      deployment_id: 'd1',
      observed_revision: null,
      phase: 'ready',
      ready_replicas: 1,
      replica_ids: ['r1'],
      message: 'ok',
      seq: 9,
    };
    expectAligned(DEPLOYMENT_COLUMNS, deploymentRow(d), d);
  });

  it('event rows', () => {
    const e: IngestBatch['events'][number] = {
      frame_id: '01J9X2E5G7QK8V3B0YHN4TZC6M',
      kind: 'node',
      subject: 'n1',
      reason: 'NodeNotReady',
      message: 'kubelet stopped',
      severity: 'warning',
      occurred_at: '2026-08-19T14:02:10.913Z',
      seq: 3,
    };
    expectAligned(EVENT_COLUMNS, eventRow(e), e);
  });

  it('an occurred_at written in year 0000 reaches the database in UTC (Postgres refuses year 0000 as written, whatever the offset)', () => {
    expect(utcTime('0000-12-31T23:30:00-01:00')).toBe('0001-01-01T00:30:00Z');
    expect(utcTime('0000-12-31T00:01:00.5-23:59')).toBe('0001-01-01T00:00:00.5Z');
    expect(utcTime('2026-08-19T14:02:10.913-01:00')).toBe('2026-08-19T14:02:10.913-01:00');
  });
});
