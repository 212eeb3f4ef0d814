import type { IngestBatch } from './ingest-types';

/**
 * The row tables (one row per frame) travel as positional rows, `[["GPU-1","n1",…,4412],…]`,
 * read back with `r->>i`: against `jsonb_to_recordset` over objects that is ~40% fewer bytes to
 * serialize, send and parse, and no key lookups per column (bench/MICRO.md). The column list
 * is the one place the order is written: it makes both the SQL and the encoder's contract
 * (test/unit/ingest-rows.test.ts checks each encoder against it); src/hub/db/ingest.ts writes the SQL.
 */
type Column = readonly [name: string, type: 'text' | 'jsonb' | 'boolean' | 'int' | 'bigint' | 'timestamptz'];

export const NODE_COLUMNS = [
  ['node_id', 'text'],
  ['name', 'text'],
  ['ready', 'boolean'],
  ['schedulable', 'boolean'],
  ['labels', 'jsonb'],
  ['taints', 'jsonb'],
  // A count may be up to 2^53 − 1: an int cast refused a valid one above 2^31 − 1 (migration 0016).
  ['gpus', 'bigint'],
  ['cpu_millis', 'bigint'],
  ['memory_mb', 'bigint'],
  ['seq', 'bigint'],
] as const satisfies readonly Column[];

export const DEVICE_COLUMNS = [
  ['device_id', 'text'],
  ['node_id', 'text'],
  ['vendor', 'text'],
  ['model', 'text'],
  ['memory_total_mb', 'bigint'],
  ['health', 'text'],
  ['driver_version', 'text'],
  ['seq', 'bigint'],
] as const satisfies readonly Column[];

export const DEPLOYMENT_COLUMNS = [
  ['deployment_id', 'text'],
  ['observed_revision', 'bigint'],
  ['phase', 'text'],
  ['ready_replicas', 'int'],
  ['replica_ids', 'jsonb'],
  ['message', 'text'],
  ['seq', 'bigint'],
] as const satisfies readonly Column[];

export const EVENT_COLUMNS = [
  ['frame_id', 'text'],
  ['kind', 'text'],
  ['subject', 'text'],
  ['reason', 'text'],
  ['message', 'text'],
  ['severity', 'text'],
  ['occurred_at', 'timestamptz'],
  ['seq', 'bigint'],
] as const satisfies readonly Column[];

/** `select <columns> from` the positional rows in `param` (a JSON array of arrays). */
export function positional(param: string, columns: readonly Column[]): string {
  const cols = columns.map(([name, type], i) =>
    type === 'jsonb' ? `r->${i} as ${name}` : type === 'text' ? `r->>${i} as ${name}` : `(r->>${i})::${type} as ${name}`,
  );
  return `select ${cols.join(', ')} from jsonb_array_elements(${param}::jsonb) r`;
}

type Rows<T> = readonly T[];
export const nodeRow = (n: IngestBatch['nodes'][number]) =>
  [n.node_id, n.name, n.ready, n.schedulable, n.labels, n.taints, n.allocatable.gpus, n.allocatable.cpu_millis, n.allocatable.memory_mb, n.seq] as const;
export const deviceRow = (d: IngestBatch['devices'][number]) =>
  [d.device_id, d.node_id, d.vendor, d.model, d.memory_total_mb, d.health, d.driver_version, d.seq] as const;
export const deploymentRow = (d: IngestBatch['deployments'][number]) =>
  [d.deployment_id, d.observed_revision, d.phase, d.ready_replicas, d.replica_ids, d.message, d.seq] as const;
export const eventRow = (e: IngestBatch['events'][number]) =>
  [e.frame_id, e.kind, e.subject, e.reason, e.message, e.severity, utcTime(e.occurred_at), e.seq] as const;

const OFFSET_RE = /([+-])(\d{2}):(\d{2})$/;
/** The widest offset timestamptz reads, in minutes (RFC 3339 admits up to ±23:59). */
const PG_OFFSET_MAX_MIN = 15 * 60 + 59;
const pad = (n: number, width = 2) => String(n).padStart(width, '0');

/**
 * An RFC 3339 time as Postgres reads it: as sent when Postgres reads it as that instant, else the
 * same instant written in UTC by hand (not through toISOString, which would cut the fraction to
 * milliseconds). Postgres refuses an offset wider than timestamptz takes (22009) and a leap second
 * with a fraction (22008: every real one, 23:59:60.x in UTC): a valid event dropped as poison. And
 * it rounds a fraction past microseconds, which can carry the last instant of 9999 into year 10000,
 * which reads back as no RFC 3339 time: the fraction is cut to microseconds instead. The instant is
 * in years 1 to 9999 in UTC (`namesTime`). A leap second rolls over, as Postgres rolls it.
 */
export function utcTime(s: string): string {
  const m = OFFSET_RE.exec(s);
  const offset = m ? (Number(m[2]) * 60 + Number(m[3])) * (m[1] === '-' ? -1 : 1) : 0;
  const fraction = s.slice(19, m ? s.length - 6 : s.length - 1);
  const leap = s.slice(17, 19) === '60';
  // Postgres refuses year 0000 as written, even where the offset puts the instant in year 1.
  const yearZero = s.startsWith('0000');
  if (Math.abs(offset) <= PG_OFFSET_MAX_MIN && !leap && fraction.length <= 7 && !yearZero) return s;
  const d = new Date(0);
  d.setUTCFullYear(Number(s.slice(0, 4)), Number(s.slice(5, 7)) - 1, Number(s.slice(8, 10)));
  d.setUTCHours(Number(s.slice(11, 13)), Number(s.slice(14, 16)) - offset, Number(s.slice(17, 19)));
  return `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}${fraction.slice(0, 7)}Z`;
}

/** One parameter's JSON text; most tables are empty in most batches. */
export function json<T>(rows: Rows<T>): string;
export function json<T, R>(rows: Rows<T>, row: (x: T) => R): string;
export function json<T, R>(rows: Rows<T>, row?: (x: T) => R): string {
  if (rows.length === 0) return '[]';
  return JSON.stringify(row ? rows.map(row) : rows);
}
