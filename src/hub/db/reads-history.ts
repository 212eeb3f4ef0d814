import type { OperationKind, Payload, SEVERITIES } from '../../protocol';
import { cappedCount, COUNT_CAP } from './capped-count';
import type { Sql } from './sql';
import { byteCut, CLUSTER_CTE, iso, keyTs, num, toByteCutPage, toPage, type ByteCutRow, type KeyedPage, type PageRequest } from './read-paging';

/** The admin API's reads of what happened: events, rejections, operations and their history. */
// ---------------------------------------------------------------------------------------------
// Events and rejections: history, newest first
// ---------------------------------------------------------------------------------------------

export const EVENT_KINDS = ['node', 'device', 'deployment'] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

export interface EventView {
  frame_id: string;
  kind: EventKind;
  subject: string;
  reason: string;
  message: string;
  severity: (typeof SEVERITIES)[number];
  occurred_at: string;
  received_at: string;
  session_id: string;
  seq: number;
}

/** Newest first by arrival at the hub, then by frame id (a batch shares one arrival time). */
export type EventKey = readonly [received_at: string, frame_id: string];

interface EventRow extends Omit<EventView, 'seq' | 'frame_id'> {
  frame_id: string | null;
  seq: string;
  k_received_at: string;
}

const EVENTS_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.frame_id, t.kind, t.subject, t.reason, t.message, t.severity, ${iso('t.occurred_at')} as occurred_at,
    ${iso('t.received_at')} as received_at, t.session_id, t.seq, ${keyTs('t.received_at')} as k_received_at
  from events t
  where t.cluster_uid = (select uid from cl)
    and ($2::text is null or t.kind = $2) and ($3::text is null or t.subject = $3)
    and ($4::timestamptz is null or (t.received_at, t.frame_id) < ($4::timestamptz, $5::text))
  order by t.received_at desc, t.frame_id desc limit $6
)
select p.* from cl left join page p on true
order by p.k_received_at desc, p.frame_id desc`;

export async function listEvents(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<EventKey> & { kind: EventKind | null; subject: string | null },
): Promise<KeyedPage<EventView, EventKey> | null> {
  const { rows } = await sql.query<EventRow>(EVENTS_SQL, [
    idOrName,
    opts.kind,
    opts.subject,
    opts.after?.[0] ?? null,
    opts.after?.[1] ?? null,
    opts.limit + 1,
  ]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.frame_id !== null,
    (r): EventView => ({
      frame_id: r.frame_id as string,
      kind: r.kind,
      subject: r.subject,
      reason: r.reason,
      message: r.message,
      severity: r.severity,
      occurred_at: r.occurred_at,
      received_at: r.received_at,
      session_id: r.session_id,
      seq: num(r.seq),
    }),
    (r) => [r.k_received_at, r.frame_id as string] as const,
  );
}

export interface RejectionView {
  id: number;
  session_id: string;
  seq: number;
  frame_id: string | null;
  type: string;
  reason: string;
  received_at: string;
}

/** Newest first by the table's serial id (its insertion order). */
export type RejectionKey = readonly [id: string];

interface RejectionRow {
  id: string | null;
  session_id: string;
  seq: string;
  frame_id: string | null;
  type: string;
  reason: string;
  received_at: string;
}

const REJECTIONS_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.id, t.session_id, t.seq, t.frame_id, t.type, t.reason, ${iso('t.received_at')} as received_at
  from rejections t
  where t.cluster_uid = (select uid from cl) and ($2::bigint is null or t.id < $2)
  order by t.id desc limit $3
)
select p.* from cl left join page p on true
order by p.id desc`;

export async function listRejections(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<RejectionKey>,
): Promise<KeyedPage<RejectionView, RejectionKey> | null> {
  const { rows } = await sql.query<RejectionRow>(REJECTIONS_SQL, [idOrName, opts.after?.[0] ?? null, opts.limit + 1]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.id !== null,
    (r): RejectionView => ({
      id: num(r.id as string),
      session_id: r.session_id,
      seq: num(r.seq),
      frame_id: r.frame_id,
      type: r.type,
      reason: r.reason,
      received_at: r.received_at,
    }),
    (r) => [String(r.id)] as const,
  );
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

/** The stored states, plus `deadline_exceeded`, which is computed at read time and never stored. */
export const OPERATION_STATES = [
  'pending',
  'sent',
  'accepted',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'deadline_exceeded',
] as const;
export type OperationState = (typeof OPERATION_STATES)[number];

export const OPERATION_EVENT_KINDS = ['accepted', 'progress', 'result', 'error'] as const;

export interface OperationView {
  operation_id: string;
  cluster_uid: string;
  kind: OperationKind;
  target: string;
  params: Payload<'operation.start'>['params'];
  deadline: string;
  state: OperationState;
  outcome_message: string | null;
  created_at: string;
  sent_at: string | null;
  accepted_at: string | null;
  concluded_at: string | null;
}

export interface OperationHistoryEntry {
  frame_id: string;
  kind: (typeof OPERATION_EVENT_KINDS)[number];
  /** progress: the phase; result: the outcome; error: the error code. */
  phase: string | null;
  message: string;
  at: string;
  seq: number | null;
}

export interface OperationDetail extends OperationView {
  /** The first HISTORY_EDGE entries and the latest HISTORY_EDGE, in order (all of them when no more). */
  history: OperationHistoryEntry[];
  /** Entries left out between the first and the latest (0: `history` is the whole of it), counted up to COUNT_CAP. */
  history_omitted: number;
  /** More than COUNT_CAP were left out: `history_omitted` is a lower bound. */
  history_omitted_at_least: boolean;
}

/**
 * How many of an operation's first and of its latest history entries a read returns. The history
 * is the operator's to write (a progress frame per entry, up to 2 KB each, for as long as the
 * deadline allows: up to a week), so all of it would be an answer of any size; the beginning
 * (accepted, the first phases) and the end (the latest phase, the outcome) are what a person
 * reads. At most 200 entries, about 400 KB.
 */
export const HISTORY_EDGE = 100;

/** Newest first by creation, then by id. */
export type OperationKey = readonly [created_at: string, operation_id: string];

interface OperationRow extends Omit<OperationView, 'operation_id'> {
  operation_id: string | null;
  k_created_at: string;
}

// An operation past its deadline with no conclusion is shown, not stored, as deadline_exceeded:
// a late result still concludes it (the hub records what the operator reports), and the state a
// client sees is computed against the database's clock in the same statement.
const OPERATION_COLS = `o.operation_id, o.cluster_uid, o.kind, o.target, o.params, ${iso('o.deadline')} as deadline,
  case when o.concluded_at is null and o.deadline < now() then 'deadline_exceeded' else o.state end as state,
  o.outcome_message, ${iso('o.created_at')} as created_at, ${iso('o.sent_at')} as sent_at,
  ${iso('o.accepted_at')} as accepted_at, ${iso('o.concluded_at')} as concluded_at`;

function toOperation(r: OperationRow): OperationView {
  return {
    operation_id: r.operation_id as string,
    cluster_uid: r.cluster_uid,
    kind: r.kind,
    target: r.target,
    params: r.params,
    deadline: r.deadline,
    state: r.state,
    outcome_message: r.outcome_message,
    created_at: r.created_at,
    sent_at: r.sent_at,
    accepted_at: r.accepted_at,
    concluded_at: r.concluded_at,
  };
}

/**
 * History in the order the operator reported it: by arrival time, then by the operator's seq
 * (frames applied in one batch share an arrival time, and seq is their order on the wire even if
 * the operator's frame ids are not monotonic), then by frame id. Only its two ends are read, each
 * by the index in that order (migration 0018); the union drops what both ends hold (a short
 * history), and the count is an index-only scan.
 */
const HISTORY_ENTRY = `jsonb_build_object('frame_id', e.frame_id, 'kind', e.kind, 'phase', e.phase,
  'message', e.message, 'at', ${iso('e.at')}, 'seq', e.seq)`;
const OPERATION_SQL = `
select ${OPERATION_COLS},
  -- Counted up to one past what may be reported as left out: the operator writes as many entries
  -- as it likes, and an open operation's view is polled every second.
  ${cappedCount('operation_events e where e.operation_id = o.operation_id', COUNT_CAP + 2 * HISTORY_EDGE + 1)} as history_total,
  coalesce((
    select jsonb_agg(h.entry order by h.at, h.seq, h.frame_id) from (
      (select e.at, e.seq, e.frame_id, ${HISTORY_ENTRY} as entry from operation_events e
       where e.operation_id = o.operation_id order by e.at, e.seq, e.frame_id limit ${HISTORY_EDGE})
      union
      (select e.at, e.seq, e.frame_id, ${HISTORY_ENTRY} as entry from operation_events e
       where e.operation_id = o.operation_id order by e.at desc, e.seq desc, e.frame_id desc limit ${HISTORY_EDGE})
    ) h
  ), '[]'::jsonb) as history
from operations o where o.operation_id = $1`;

export async function getOperation(sql: Sql, operationId: string): Promise<OperationDetail | null> {
  const { rows } = await sql.query<OperationRow & { history: OperationHistoryEntry[]; history_total: string }>(OPERATION_SQL, [operationId]);
  const r = rows[0];
  if (!r) return null;
  const omitted = num(r.history_total) - r.history.length;
  return { ...toOperation(r), history: r.history, history_omitted: Math.min(omitted, COUNT_CAP), history_omitted_at_least: omitted > COUNT_CAP };
}

const OPERATIONS_SQL = `
with ${CLUSTER_CTE},
page as (
  select ${OPERATION_COLS}, ${keyTs('o.created_at')} as k_created_at,
    400 + octet_length(o.target) + octet_length(o.params::text) + coalesce(octet_length(o.outcome_message), 0) as sz
  from operations o
  where o.cluster_uid = (select uid from cl)
    and ($2::timestamptz is null or (o.created_at, o.operation_id) < ($2::timestamptz, $3::text))
  order by o.created_at desc, o.operation_id desc limit $4
),
-- Bounded in bytes too, like the node and deployment lists: 500 operations whose params hold
-- their most would not cross the gateway's RPC in one answer.
kept as (${byteCut('page', ['k_created_at desc', 'operation_id desc'])})
select k.*, (select count(*) from page) as page_rows from cl left join kept k on true
order by k.k_created_at desc, k.operation_id desc`;

export async function listOperations(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<OperationKey>,
): Promise<KeyedPage<OperationView, OperationKey> | null> {
  const { rows } = await sql.query<OperationRow & ByteCutRow>(OPERATIONS_SQL, [idOrName, opts.after?.[0] ?? null, opts.after?.[1] ?? null, opts.limit + 1]);
  return toByteCutPage(
    rows,
    opts.limit,
    (r) => r.operation_id !== null,
    toOperation,
    (r) => [r.k_created_at, r.operation_id as string] as const,
  );
}
