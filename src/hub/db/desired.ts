import type { Payload } from '../../protocol';
import { fenceCte } from './ownership';
import type { SessionFence } from './ingest';
import { iso } from './read-paging';
import type { Sql } from './sql';

/** A change the owning session must put into its stream, in revision order. */
export type DesiredChange =
  | { kind: 'deployment'; revision: number; payload: Payload<'deployment.desired'> }
  | { kind: 'operation'; revision: number; payload: Payload<'operation.start'> };

interface ChangeRow {
  kind: 'deployment' | 'operation';
  revision: string;
  deployment_id: string | null;
  workload_id: string | null;
  min_replicas: number | null;
  max_replicas: number | null;
  serving: Payload<'deployment.desired'>['serving'];
  deleted: boolean | null;
  operation_id: string | null;
  op_kind: Payload<'operation.start'>['kind'] | null;
  target: string | null;
  params: Payload<'operation.start'>['params'] | null;
  deadline: string | null;
}

function toChange(r: ChangeRow): DesiredChange {
  const revision = Number(r.revision);
  if (r.kind === 'deployment') {
    return {
      kind: 'deployment',
      revision,
      payload: {
        deployment_id: r.deployment_id as string,
        workload_id: r.workload_id as string,
        revision,
        min_replicas: r.min_replicas as number,
        max_replicas: r.max_replicas as number,
        serving: r.deleted ? null : r.serving,
        deleted: r.deleted === true,
      },
    };
  }
  return {
    kind: 'operation',
    revision,
    payload: {
      operation_id: r.operation_id as string,
      kind: r.op_kind as Payload<'operation.start'>['kind'],
      target: r.target as string,
      params: r.params ?? {},
      deadline: r.deadline as string,
    },
  };
}

const DEPLOYMENT_COLS = `'deployment'::text as kind, revision, deployment_id, workload_id, min_replicas, max_replicas,
  serving, deleted, null::text as operation_id, null::text as op_kind, null::text as target, null::jsonb as params,
  null::text as deadline`;
// Named like DEPLOYMENT_COLS: used alone (open operations), an unaliased `kind` would overwrite
// the row's discriminator and leave `op_kind` empty. The deadline leaves as text made in SQL: the
// driver parses timestamptz only in DateStyle ISO, and under a database's other default it sent
// operators a deadline in 1970, which the SDK answers at once as passed.
const OPERATION_COLS = `'operation'::text as kind, revision, null::text as deployment_id, null::text as workload_id,
  null::int as min_replicas, null::int as max_replicas, null::jsonb as serving, null::boolean as deleted,
  operation_id, kind as op_kind, target, params, ${iso('deadline')} as deadline`;

// Roughly each row's frame size: the JSON of its large column plus the rest (ids, numbers,
// envelope). Serving configurations can each be up to max_frame_bytes: a page sized by rows
// alone could outgrow the gateway's RPC (32 MiB) or the session's send queue.
const DEPLOYMENT_BYTES = 'coalesce(octet_length(serving::text), 0) + octet_length(deployment_id) + octet_length(workload_id) + 400';
const OPERATION_BYTES = 'coalesce(octet_length(params::text), 0) + octet_length(target) + octet_length(operation_id) + 400';

/**
 * `inner` (a query ordered by `key` with a row limit and an `sz` column) cut by bytes as well:
 * rows are kept while the bytes before them are under `maxBytes`, and the first row always, so
 * a page overshoots by at most one row and one too large for the budget still moves. Each row
 * carries `through_bytes` (its own and every row's before it), which tells the caller whether the
 * cut may have left rows behind. One running sum, no count over the whole page: a window that
 * must see every row first buffers them all (1.8 ms more per page of 1,000 deployments, pgbench).
 */
function byteBounded(inner: string, key: string, maxBytes: string): string {
  return `select * from (
    select q.*, sum(q.sz) over (order by q.${key} rows between unbounded preceding and current row) as through_bytes
    from (${inner}) q
  ) p where p.through_bytes = p.sz or p.through_bytes - p.sz < ${maxBytes}`;
}

interface Bounded {
  through_bytes: string | number | null;
}

/**
 * Whether rows may follow a page: its row limit was reached, or its bytes reached the budget (the
 * next row, if any, was cut). At worst one empty read more; never a page taken for the last when
 * rows were cut from it.
 */
function morePast(rows: readonly Bounded[], limit: number, maxBytes: number): boolean {
  const last = rows[rows.length - 1];
  return last !== undefined && (rows.length >= limit || Number(last.through_bytes ?? 0) >= maxBytes);
}

/** A page of a desired-state read: `more` when rows may follow it. */
export interface Page<T> {
  rows: T[];
  more: boolean;
}

/**
 * `page` read only while the session still holds its claim, on the cluster's current token, of
 * an enabled cluster: a disabled or rotated cluster's session is cut at its next check, and until
 * then it must not read (a resync it asks for would carry what was written after the revocation).
 * One row with `held` false and nothing else when it does not; rows ordered by `key`. No lock:
 * the statement's one snapshot decides both the claim and the rows, so rows written after a
 * revocation are never read under a claim that predates it.
 */
function whileClaimHeld(page: string, key: string, f: string[]): string {
  return `select q.*, h.held from (select ${claimHeld(f)} as held) h
    left join lateral (${page}) q on h.held
    order by q.${key}`;
}

/** True while the session holds the claim it was granted, under the token it was granted with. */
function claimHeld(f: string[]): string {
  const [cluster, session, generation, tokenHash] = f;
  return `exists (select 1 from cluster_owners o join clusters c on c.uid = o.cluster_uid
                  where o.cluster_uid = ${cluster} and o.session_id = ${session} and o.generation = ${generation}
                    and not o.revoked and c.disabled_at is null and c.token_hash = decode(${tokenHash}, 'hex'))`;
}

interface Held {
  held: boolean;
}

/** The page's rows, or null when the session no longer holds its claim. */
function heldRows<R extends Held>(rows: readonly R[], present: (r: R) => boolean): R[] | null {
  if (rows[0]?.held !== true) return null;
  return rows.filter(present);
}

const fenceParams = (fence: SessionFence): unknown[] => [fence.clusterUid, fence.sessionId, fence.generation, fence.tokenHash];

/**
 * Everything above `after` (deployments, withdrawals, new operations), oldest revision first,
 * leaving out operations at or below `opsAfter` (a resync delivered them); null when the session
 * no longer holds its claim (whileClaimHeld).
 */
export async function fetchDesiredChanges(
  sql: Sql,
  fence: SessionFence,
  after: number,
  limit: number,
  maxBytes: number,
  opsAfter = 0,
): Promise<Page<DesiredChange> | null> {
  const { rows } = await sql.query<ChangeRow & Bounded & Held>(
    whileClaimHeld(
      byteBounded(
        `select * from (
           select ${DEPLOYMENT_COLS}, ${DEPLOYMENT_BYTES} as sz from desired_deployments where cluster_uid = $1 and revision > $5
           union all
           select ${OPERATION_COLS}, ${OPERATION_BYTES} as sz from operations
           where cluster_uid = $1 and revision > greatest($5, $8::bigint) and concluded_at is null and deadline > now()
         ) c order by revision limit $6`,
        'revision',
        '$7',
      ),
      'revision',
      ['$1', '$2', '$3', '$4'],
    ),
    [...fenceParams(fence), after, limit, maxBytes, opsAfter],
  );
  const page = heldRows(rows, (r) => r.kind !== null);
  return page && { rows: page.map(toChange), more: morePast(page, limit, maxBytes) };
}

/** One page of the hub's full-resync snapshot: live deployments by id; null as for fetchDesiredChanges. */
export async function fetchDesiredSnapshotPage(
  sql: Sql,
  fence: SessionFence,
  after: string | null,
  limit: number,
  maxBytes: number,
): Promise<Page<Extract<DesiredChange, { kind: 'deployment' }>> | null> {
  const { rows } = await sql.query<ChangeRow & Bounded & Held>(
    whileClaimHeld(
      byteBounded(
        `select ${DEPLOYMENT_COLS}, ${DEPLOYMENT_BYTES} as sz from desired_deployments
         where cluster_uid = $1 and not deleted and ($5::text is null or deployment_id > $5)
         order by deployment_id limit $6`,
        'deployment_id',
        '$7',
      ),
      'deployment_id',
      ['$1', '$2', '$3', '$4'],
    ),
    [...fenceParams(fence), after, limit, maxBytes],
  );
  const page = heldRows(rows, (r) => r.kind !== null);
  return page && { rows: page.map(toChange) as Extract<DesiredChange, { kind: 'deployment' }>[], more: morePast(page, limit, maxBytes) };
}

/**
 * Whether cluster $1 has an operation open at or below revision $3: read at every fresh session's
 * claim. By the partial index of migration 0031, whatever the cluster's concluded history.
 */
export const OPEN_OPERATIONS = `exists (select 1 from operations
  where cluster_uid = $1 and revision <= $3 and concluded_at is null and deadline > now())`;

/**
 * A fresh session's first snapshot page, and whether unconcluded operations up to its claimed
 * revision are owed, in one statement (claim-snapshot.ts). The flag's row carries the page
 * through a lateral join, so an empty snapshot still answers it. Read after the claim committed,
 * so fenced as every desired read of a session is (whileClaimHeld): null once a rotation or a
 * disable took the claim's token away, or a newer hello the claim, and nothing written after that
 * is read.
 */
export async function fetchFirstSnapshotPage(
  sql: Sql,
  fence: SessionFence,
  upToRevision: number,
  limit: number,
  maxBytes: number,
): Promise<{ deployments: Payload<'deployment.desired'>[]; more: boolean; openOperations: boolean } | null> {
  const { rows } = await sql.query<ChangeRow & Bounded & Held & { open_operations: boolean }>(
    `select d.*, o.open_operations, h.held
     from (select ${claimHeld(['$1', '$5', '$6', '$7'])} as held) h
     cross join (select ${OPEN_OPERATIONS} as open_operations) o
     left join lateral (
       ${byteBounded(
         `select ${DEPLOYMENT_COLS}, ${DEPLOYMENT_BYTES} as sz from desired_deployments
          where cluster_uid = $1 and not deleted order by deployment_id limit $2`,
         'deployment_id',
         '$4',
       )}
     ) d on h.held
     order by d.deployment_id`,
    [fence.clusterUid, limit, upToRevision, maxBytes, fence.sessionId, fence.generation, fence.tokenHash],
    'wingsmith_first_page_v5',
  );
  if (rows[0]?.held !== true) return null;
  const page = rows.filter((r) => r.deployment_id !== null);
  return {
    deployments: page.map((r) => toChange(r).payload as Payload<'deployment.desired'>),
    more: morePast(page, limit, maxBytes),
    openOperations: rows[0]?.open_operations === true,
  };
}

/**
 * Operations a fresh session must deliver again: outside the resync contract, an unconcluded
 * operation is never superseded by a snapshot. Redelivery is harmless (the operator dedupes).
 */
export async function fetchOpenOperations(
  sql: Sql,
  clusterUid: string,
  afterRevision: number,
  upToRevision: number,
  limit: number,
  maxBytes: number,
): Promise<Page<Extract<DesiredChange, { kind: 'operation' }>>> {
  const { rows } = await sql.query<ChangeRow & Bounded>(
    `${byteBounded(
      `select ${OPERATION_COLS}, ${OPERATION_BYTES} as sz from operations
       where cluster_uid = $1 and revision > $2 and revision <= $3 and concluded_at is null and deadline > now()
       order by revision limit $4`,
      'revision',
      '$5',
    )} order by p.revision`,
    [clusterUid, afterRevision, upToRevision, limit, maxBytes],
  );
  return { rows: rows.map(toChange) as Extract<DesiredChange, { kind: 'operation' }>[], more: morePast(rows, limit, maxBytes) };
}

/** An operation's revision (fixed when it is created); null when the cluster has no such operation. */
export async function operationRevision(sql: Sql, clusterUid: string, operationId: string): Promise<number | null> {
  const { rows } = await sql.query<{ revision: number | string }>('select revision from operations where cluster_uid = $1 and operation_id = $2', [
    clusterUid,
    operationId,
  ]);
  return rows[0] ? Number(rows[0].revision) : null;
}

/**
 * How many of an operation's start frames are remembered: the first (an operator that keeps its
 * operations durably answers the start it first accepted, across reconnects and restarts) and the
 * newest after it. Each fresh session delivers an open operation again, and an operator that
 * reconnects fresh as fast as it can must not grow the row (and its GIN index) for as long as a
 * deadline of up to a week. An error answering a start frame not kept concludes nothing and is
 * logged, as an error whose reply_to names nothing the hub remembers (MESSAGES.md).
 */
export const START_FRAMES_KEPT = 16;

/**
 * Conclude as failed the operations whose operation.start can never be sent (larger than a frame
 * may be: written by another writer of Postgres, or under a larger MAX_FRAME_BYTES). The send path
 * sends an error in each one's place; without this the operation stayed "sent", was delivered
 * again to every fresh session and refused again, and was never reported. Fenced like every
 * session write; one already concluded is left alone.
 */
export async function failUnsendableOperations(sql: Sql, fence: SessionFence, failed: readonly { operation_id: string; message: string }[]): Promise<boolean> {
  const { rows } = await sql.query<{ fenced: boolean }>(
    `with ${fenceCte({ cluster: '$1', session: '$2', generation: '$3', tokenHash: '$4' })},
     upd as (
       update operations o set state = 'failed', outcome_message = s.message, concluded_at = now(), updated_at = now()
       from jsonb_to_recordset($5::jsonb) as s(operation_id text, message text)
       where o.operation_id = s.operation_id and o.cluster_uid = $1 and o.concluded_at is null and exists (select 1 from fence)
       returning 1
     )
     select exists (select 1 from fence) as fenced, (select count(*) from upd) as n`,
    [fence.clusterUid, fence.sessionId, fence.generation, fence.tokenHash, JSON.stringify(failed)],
  );
  return rows[0]?.fenced === true;
}

/** Record which start frames carried which operations, fenced by the session's claim. */
export async function markOperationsSent(
  sql: Sql,
  fence: SessionFence,
  sent: { operation_id: string; frame_id: string }[],
): Promise<boolean> {
  const { rows } = await sql.query<{ fenced: boolean }>(
    `with ${fenceCte({ cluster: '$1', session: '$2', generation: '$3', tokenHash: '$4' })},
     upd as (
       update operations o set
         state = case when o.state = 'pending' then 'sent' else o.state end,
         sent_at = coalesce(o.sent_at, now()),
         -- A retry after a lost answer records the id it may already have recorded.
         start_frame_ids = case when s.frame_id = any(o.start_frame_ids) then o.start_frame_ids
           when cardinality(o.start_frame_ids) < $6::int then o.start_frame_ids || array[s.frame_id]
           else o.start_frame_ids[1:1] || o.start_frame_ids[cardinality(o.start_frame_ids) - $6::int + 3:] || array[s.frame_id] end,
         updated_at = now()
       from jsonb_to_recordset($5::jsonb) as s(operation_id text, frame_id text)
       where o.operation_id = s.operation_id and o.cluster_uid = $1 and exists (select 1 from fence)
       returning 1
     )
     select exists (select 1 from fence) as fenced, (select count(*) from upd) as n`,
    [fence.clusterUid, fence.sessionId, fence.generation, fence.tokenHash, JSON.stringify(sent), START_FRAMES_KEPT],
    'wingsmith_mark_operations_sent_v2',
  );
  return rows[0]?.fenced === true;
}
