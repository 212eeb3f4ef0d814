/**
 * The convergence checker: does the plane's state in Postgres agree with the simulated cluster,
 * and did the link keep its promises on the way there?
 *
 * Agreement (waited for, bounded):
 * - observed: `observed_clusters`, `nodes`, `devices`, `observed_deployments` and `replicas` hold
 *   exactly the cluster model's snapshot, field for field, no row more, no row less;
 * - desired: the deployments the operator holds (the model's desired map) are exactly
 *   Postgres' non-deleted `desired_deployments`, with the stored `min_replicas`/`max_replicas`,
 *   revision, workload and serving configuration as stored (never summed, scaled or
 *   re-derived), and each is rendered as exactly `min(min, max)` replicas;
 * - the link is quiet: the operator is connected, its queue is empty, everything it sent in the
 *   current session is acknowledged, and every operation is concluded.
 *
 * Invariants (checked once agreement is reached; each violation is a sentence):
 * - the hub sent only valid catalog messages (every frame it wrote decodes as one);
 * - nothing acked is lost: every event frame the hub acknowledged is in `events` (events are
 *   history: nothing may overwrite or prune them, so this holds at any instant);
 * - nothing invented: every stored event is one an operator of this cluster sent;
 * - every observed row names, in (obs_session, obs_seq), a frame an operator of this cluster
 *   sent about that same subject, and says what that frame said;
 * - nothing pruned wrongly: every object that exists in the cluster is present in Postgres
 *   (part of agreement, restated as a violation when agreement is claimed but rows are missing);
 * - operations concluded exactly once: each concluded operation has one conclusion, the first
 *   one recorded, matching every conclusion the operator got acknowledged; every operation the
 *   admin API accepted is stored (when the caller lists them); optionally, each operation's
 *   handler ran exactly once in the cluster.
 */
import type { Payload } from '../../../src/protocol';
import type { SimCluster } from './sim-cluster';
import type { WireTap } from './wire-tap';

export type Query = <R = Record<string, unknown>>(text: string, params?: unknown[]) => Promise<R[]>;

export interface ConvergeTarget {
  /** The cluster's uid in the registry. */
  uid: string;
  /** The cluster whose model is the truth (the survivor, when operators competed). */
  cluster: SimCluster;
  /** Taps of other operators that spoke for this cluster (displaced ones). */
  otherTaps?: WireTap[];
  /** Every event sent is stored and every event emitted was either sent or counted as dropped. */
  exactEvents?: boolean;
  /** Each operation's handler ran exactly once (only true when the operator's records are durable or it never restarted). */
  operationsRunOnce?: boolean;
  /** Operations the admin API accepted (202) for this cluster: each must be stored, as the checks below read it. */
  operationsAccepted?: ReadonlySet<string>;
  /** Every desired deployment fits: each must run exactly min(min, max) replicas. Default true. */
  expectFullPlacement?: boolean;
}

export interface PlaneState {
  cluster: Record<string, unknown> | null;
  nodes: Map<string, Row>;
  devices: Map<string, Row>;
  deployments: Map<string, Row>;
  replicas: Map<string, string[]>;
  events: Set<string>;
  desired: Map<string, Row>;
  operations: OperationRow[];
  linkStats: Row | null;
  /**
   * The hub's acks on the wire (per session, over every tap) taken just before this plane was
   * read: "nothing acked is lost" holds the read to these, since the hub acks only after the
   * commit. An ack that arrived during the read can be for a commit the read did not see.
   * Absent: the acks as they are when the invariants are checked (a plane read at rest).
   */
  acksAtRead?: ReadonlyMap<string, number>;
  /** Frames the hub accepted and recorded as rejected (frame id → reason; id null when the frame had none). */
  rejections: { frameId: string | null; seq: number; type: string; reason: string }[];
}

type Row = Record<string, unknown>;

interface OperationRow {
  operation_id: string;
  state: string;
  outcome_message: string | null;
  concluded_at: string | null;
  conclusions: { frame_id: string; kind: string; phase: string | null; at: string }[];
}

export interface ConvergeReport {
  ms: number;
  polls: number;
  counts: { nodes: number; devices: number; deployments: number; replicas: number; events: number; desired: number; operations: number };
  eventsSent: number;
  eventsAcked: number;
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'deadline_exceeded']);

export async function readPlane(query: Query, uid: string): Promise<PlaneState> {
  const [cl, nodes, devices, deps, reps, evs, desired, ops, conc, ls, rej] = await Promise.all([
    query('select kubernetes_version, provider, region, labels, obs_session, obs_seq from observed_clusters where cluster_uid = $1', [uid]),
    query('select * from nodes where cluster_uid = $1', [uid]),
    query('select * from devices where cluster_uid = $1', [uid]),
    query('select * from observed_deployments where cluster_uid = $1', [uid]),
    query<{ deployment_id: string; replica_id: string }>('select deployment_id, replica_id from replicas where cluster_uid = $1', [uid]),
    query<{ frame_id: string }>('select frame_id from events where cluster_uid = $1', [uid]),
    query('select * from desired_deployments where cluster_uid = $1', [uid]),
    query<Omit<OperationRow, 'conclusions'>>(
      'select operation_id, state, outcome_message, concluded_at from operations where cluster_uid = $1',
      [uid],
    ),
    query<{ operation_id: string; frame_id: string; kind: string; phase: string | null; at: string }>(
      `select e.operation_id, e.frame_id, e.kind, e.phase, e.at from operation_events e
       join operations o using (operation_id) where o.cluster_uid = $1 and e.kind in ('result', 'error') order by e.at, e.frame_id`,
      [uid],
    ),
    query('select * from link_stats where cluster_uid = $1', [uid]),
    query<{ frame_id: string | null; seq: string; type: string; reason: string }>(
      'select frame_id, seq, type, reason from rejections where cluster_uid = $1 order by id',
      [uid],
    ),
  ]);
  const replicas = new Map<string, string[]>();
  for (const r of reps) {
    const list = replicas.get(r.deployment_id) ?? [];
    list.push(r.replica_id);
    replicas.set(r.deployment_id, list);
  }
  for (const l of replicas.values()) l.sort();
  const byOp = new Map<string, OperationRow['conclusions']>();
  for (const c of conc) {
    const list = byOp.get(c.operation_id) ?? [];
    list.push({ frame_id: c.frame_id, kind: c.kind, phase: c.phase, at: String(c.at) });
    byOp.set(c.operation_id, list);
  }
  return {
    cluster: cl[0] ?? null,
    nodes: keyed(nodes, 'node_id'),
    devices: keyed(devices, 'device_id'),
    deployments: keyed(deps, 'deployment_id'),
    replicas,
    events: new Set(evs.map((e) => e.frame_id)),
    desired: keyed(desired, 'deployment_id'),
    operations: ops.map((o) => ({ ...o, conclusions: byOp.get(o.operation_id) ?? [] })),
    linkStats: ls[0] ?? null,
    rejections: rej.map((r) => ({ frameId: r.frame_id, seq: Number(r.seq), type: r.type, reason: r.reason })),
  };
}

function keyed(rows: Row[], key: string): Map<string, Row> {
  return new Map(rows.map((r) => [String(r[key]), r]));
}

// --- projections: what a row says, and what a payload says, in one comparable shape --------------

const canon = (v: unknown): string => JSON.stringify(sortKeys(v));
function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    return Object.fromEntries(
      Object.keys(v as object)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

function nodeFromRow(r: Row) {
  return canon({
    name: r.name,
    ready: r.ready,
    schedulable: r.schedulable,
    labels: r.labels,
    taints: r.taints,
    allocatable: { gpus: num(r.gpus), cpu_millis: num(r.cpu_millis), memory_mb: num(r.memory_mb) },
  });
}
function nodeFromPayload(p: Payload<'node.observed'> | Record<string, unknown>) {
  const x = p as Payload<'node.observed'>;
  return canon({ name: x.name, ready: x.ready, schedulable: x.schedulable, labels: x.labels, taints: x.taints, allocatable: x.allocatable });
}
function deviceFromRow(r: Row) {
  return canon({
    node_id: r.node_id,
    vendor: r.vendor,
    model: r.model,
    memory_total_mb: num(r.memory_total_mb),
    health: r.health,
    driver_version: r.driver_version,
  });
}
function deviceFromPayload(p: Payload<'device.observed'> | Record<string, unknown>) {
  const x = p as Payload<'device.observed'>;
  return canon({
    node_id: x.node_id,
    vendor: x.vendor,
    model: x.model,
    memory_total_mb: x.memory_total_mb,
    health: x.health,
    driver_version: x.driver_version,
  });
}
function deploymentFromRow(r: Row, replicas: string[] | undefined) {
  return canon({
    observed_revision: num(r.observed_revision),
    phase: r.phase,
    ready_replicas: num(r.ready_replicas),
    message: r.message,
    replica_ids: [...(replicas ?? [])].sort(),
  });
}
function deploymentFromPayload(p: Payload<'deployment.observed'> | Record<string, unknown>) {
  const x = p as Payload<'deployment.observed'>;
  return canon({
    observed_revision: x.observed_revision,
    phase: x.phase,
    ready_replicas: x.ready_replicas,
    message: x.message,
    replica_ids: [...x.replica_ids].sort(),
  });
}
function clusterFromRow(r: Row) {
  return canon({ kubernetes_version: r.kubernetes_version, provider: r.provider, region: r.region, labels: r.labels });
}
function clusterFromPayload(p: Payload<'cluster.observed'> | Record<string, unknown>) {
  const x = p as Payload<'cluster.observed'>;
  return canon({ kubernetes_version: x.kubernetes_version, provider: x.provider, region: x.region, labels: x.labels });
}

// --- agreement ---------------------------------------------------------------------------------------

/** Differences between the plane and the cluster model (empty: they agree). */
export function diffObserved(plane: PlaneState, cluster: SimCluster): string[] {
  const out: string[] = [];
  const snap = cluster.model.snapshot();
  if (!plane.cluster) out.push('cluster: no observed_clusters row');
  else if (clusterFromRow(plane.cluster) !== clusterFromPayload(snap.cluster)) out.push('cluster: observed_clusters differs from the model');

  const cmp = <P>(kind: string, rows: Map<string, Row>, want: P[], idOf: (p: P) => string, fromRow: (r: Row, id: string) => string, fromP: (p: P) => string) => {
    const ids = new Set<string>();
    for (const p of want) {
      const id = idOf(p);
      ids.add(id);
      const row = rows.get(id);
      if (!row) out.push(`${kind} ${id}: in the cluster, missing from Postgres`);
      else if (fromRow(row, id) !== fromP(p)) out.push(`${kind} ${id}: Postgres ${fromRow(row, id)} ≠ cluster ${fromP(p)}`);
    }
    for (const id of rows.keys()) if (!ids.has(id)) out.push(`${kind} ${id}: in Postgres, absent from the cluster`);
  };
  cmp('node', plane.nodes, snap.nodes, (p) => p.node_id, (r) => nodeFromRow(r), nodeFromPayload);
  cmp('device', plane.devices, snap.devices, (p) => p.device_id, (r) => deviceFromRow(r), deviceFromPayload);
  cmp('deployment', plane.deployments, snap.deployments, (p) => p.deployment_id, (r, id) => deploymentFromRow(r, plane.replicas.get(id)), deploymentFromPayload);
  for (const id of plane.replicas.keys()) {
    if (!plane.deployments.has(id)) out.push(`replicas of ${id}: stored without an observed deployment`);
  }
  return out;
}

/** Differences between the desired state the operator holds and Postgres' non-deleted rows. */
export function diffDesired(plane: PlaneState, cluster: SimCluster, expectFullPlacement = true): string[] {
  const out: string[] = [];
  const held = new Map(cluster.model.toJSON().deployments.map((d) => [d.desired.deployment_id, d]));
  const stored = new Map([...plane.desired].filter(([, r]) => r.deleted !== true));
  for (const [id, row] of stored) {
    const d = held.get(id);
    if (!d) {
      out.push(`desired ${id}: in Postgres (revision ${row.revision}), not held by the operator`);
      continue;
    }
    const want = canon({
      workload_id: row.workload_id,
      revision: num(row.revision),
      min_replicas: num(row.min_replicas),
      max_replicas: num(row.max_replicas),
      serving: row.serving,
    });
    const got = canon({
      workload_id: d.desired.workload_id,
      revision: d.desired.revision,
      min_replicas: d.desired.min_replicas,
      max_replicas: d.desired.max_replicas,
      serving: d.desired.serving,
    });
    if (want !== got) out.push(`desired ${id}: operator holds ${got}, Postgres stores ${want}`);
    const target = Math.min(Number(row.min_replicas), Number(row.max_replicas));
    if (expectFullPlacement && d.replicas.length !== target) {
      out.push(`desired ${id}: renders ${d.replicas.length} replicas, stored bounds say exactly ${target}`);
    }
  }
  for (const id of held.keys()) if (!stored.has(id)) out.push(`desired ${id}: held by the operator, not (or deleted) in Postgres`);
  return out;
}

/** Why the link is not quiet yet (empty: it is). */
export function linkNotQuiet(plane: PlaneState, cluster: SimCluster): string[] {
  const out: string[] = [];
  const p = cluster.operator;
  if (!p) return ['no operator running'];
  const c = p.client;
  if (c.state !== 'open') out.push(`operator is ${c.state}`);
  const s = c.stats;
  if (s.queued > 0) out.push(`${s.queued} frames queued`);
  if (s.unacked > 0) out.push(`${s.unacked} frames unacknowledged`);
  const current = cluster.tap.currentSession;
  if (c.state === 'open' && current !== null && c.session.sessionId !== current) out.push(`operator in session ${c.session.sessionId}, the latest welcome on the wire named ${current}`);
  if (cluster.tap.unackedInCurrent > 0) out.push(`${cluster.tap.unackedInCurrent} frames of the current session not acked on the wire`);
  for (const o of plane.operations) if (!TERMINAL.has(o.state)) out.push(`operation ${o.operation_id} is ${o.state}`);
  return out;
}

/**
 * What the operator and the wire say about a link that does not settle: for a failure report, so
 * that a wedge seen once (a soak) says where it stood. Lines, most useful first.
 */
export function linkDetail(cluster: SimCluster): string[] {
  const out: string[] = [];
  const p = cluster.operator;
  if (p) {
    const c = p.client;
    const v = c.session;
    out.push(`operator ${c.state}: session ${v.sessionId}, cursor ${v.cursor} (durable ${v.durableCursor}), outbound ${JSON.stringify(v.outbound)}, unacked ${c.stats.unacked}, queued ${c.stats.queued}, lossy ${v.lossy}`);
  }
  const tap = cluster.tap;
  const current = tap.currentSession;
  const s = current ? tap.sessions.get(current) : undefined;
  if (s) {
    const unacked = [...s.sent.keys()].filter((seq) => seq > s.acked).sort((a, b) => a - b);
    const first = unacked[0];
    const firstFrame = first !== undefined ? s.sent.get(first) : undefined;
    out.push(`wire, session ${s.id}: acked through ${s.acked}; ${unacked.length} sent above it (seq ${first ?? '-'}..${unacked[unacked.length - 1] ?? '-'})`);
    if (firstFrame) out.push(`first unacked: ${tap.whereSent(firstFrame.id) ?? '?'}`);
    out.push(`last ack rises: ${JSON.stringify(s.ackRises.slice(-3).map((r) => ({ ...r, at: new Date(r.at).toISOString() })))}`);
  }
  for (const l of tap.links.slice(-4)) {
    const hello = l.hello ? { session_id: l.hello['session_id'], resume_from: l.hello['resume_from'], lossy: l.hello['lossy'] } : null;
    const welcome = l.welcome ? { session_id: l.welcome['session_id'], full_resync: l.welcome['full_resync'], ack_seq: l.welcome['ack_seq'] } : null;
    out.push(`link ${l.id} opened ${new Date(l.openedAt).toISOString()}: hello ${JSON.stringify(hello)}, welcome ${JSON.stringify(welcome)}, close ${JSON.stringify(l.close)}`);
  }
  return out;
}

// --- invariants ------------------------------------------------------------------------------------

export function checkInvariants(plane: PlaneState, target: ConvergeTarget): string[] {
  const v: string[] = [];
  const taps = [target.cluster.tap, ...(target.otherTaps ?? [])];

  // The hub only ever sends valid catalog messages.
  for (const t of taps) {
    for (const bad of t.invalidFromHub) v.push(`the hub sent a frame that is not a valid catalog message (${bad})`);
  }

  // Nothing acked is lost; nothing invented.
  const sent = new Set<string>();
  const acked = new Set<string>();
  for (const t of taps) {
    const e = t.events(plane.acksAtRead);
    for (const id of e.sent) sent.add(id);
    for (const id of e.acked) acked.add(id);
  }
  const rejectedWhy = new Map(plane.rejections.flatMap((r) => (r.frameId ? [[r.frameId, r.reason] as const] : [])));
  const lostAcked = [...acked].filter((id) => !plane.events.has(id));
  if (lostAcked.length > 0) {
    // Where each was sent and what acked it: enough to follow one through the hub's log.
    const where = lostAcked.slice(0, 3).map((id) => {
      const rejected = rejectedWhy.get(id);
      const why = rejected === undefined ? '' : `; the hub recorded it as rejected: ${rejected}`;
      for (const t of taps) {
        const w = t.whereSent(id);
        if (w) return `${id} (${w}${why})`;
      }
      return `${id}${why}`;
    });
    v.push(`${lostAcked.length} event(s) acknowledged by the hub are not stored (e.g. ${where.join(', ')})`);
  }
  // A frame the operator sent as written is valid (the SDK validates what it sends), so a
  // rejection of one is the hub refusing good data: acked, and not stored where it belongs.
  const mutated = new Set<string>();
  const sentAny = new Set<string>();
  for (const t of taps) {
    for (const f of t.sentFrames()) {
      sentAny.add(f.id);
      if (f.mutated) mutated.add(f.id);
    }
  }
  const wronglyRejected = plane.rejections.filter((r) => r.frameId !== null && sentAny.has(r.frameId) && !mutated.has(r.frameId));
  if (wronglyRejected.length > 0) {
    const e = wronglyRejected.slice(0, 3).map((r) => `${r.type} ${r.frameId} at seq ${r.seq}: ${r.reason}`);
    v.push(`the hub rejected ${wronglyRejected.length} valid frame(s) the operator sent (e.g. ${e.join('; ')})`);
  }
  const invented = [...plane.events].filter((id) => !sent.has(id));
  if (invented.length > 0) v.push(`${invented.length} stored event(s) were never sent by an operator of this cluster`);
  if (target.exactEvents) {
    // Every event sent is stored: of a plane read while the link was busy, those the hub had
    // acked before the read began (the rest were committed during or after it).
    const unsaved = [...(plane.acksAtRead ? acked : sent)].filter((id) => !plane.events.has(id));
    if (unsaved.length > 0) v.push(`${unsaved.length} event(s) sent were not stored (expected every one)`);
    const p = target.cluster.operator;
    const dropped = p ? p.client.stats.queue.droppedEvents : 0;
    if (target.cluster.processes.length === 1 && sent.size + dropped !== target.cluster.eventsEmitted) {
      v.push(`events: ${target.cluster.eventsEmitted} emitted ≠ ${sent.size} sent + ${dropped} dropped and counted`);
    }
  }

  // Row provenance: each row says what the frame that last wrote it said.
  const frameAt = (session: unknown, seq: unknown) => {
    for (const t of taps) {
      const f = t.sessions.get(String(session))?.sent.get(Number(seq));
      if (f) return f;
    }
    return undefined;
  };
  const provenance = (kind: string, id: string, row: Row, type: string, key: string | null, fromRow: string, fromP: (p: Record<string, unknown>) => string) => {
    const f = frameAt(row.obs_session, row.obs_seq);
    if (!f) {
      v.push(`${kind} ${id}: written by (${String(row.obs_session)}, ${String(row.obs_seq)}), a frame no operator of this cluster sent`);
      return;
    }
    if (f.type !== type || (key !== null && f.payload[key] !== id)) {
      v.push(`${kind} ${id}: written by seq ${String(row.obs_seq)}, which was a ${f.type} about ${String(key ? f.payload[key] : '')}`);
      return;
    }
    if (fromP(f.payload) !== fromRow) v.push(`${kind} ${id}: row differs from the frame that wrote it (seq ${String(row.obs_seq)})`);
  };
  if (plane.cluster) provenance('cluster', 'cluster', plane.cluster, 'cluster.observed', null, clusterFromRow(plane.cluster), clusterFromPayload);
  for (const [id, r] of plane.nodes) provenance('node', id, r, 'node.observed', 'node_id', nodeFromRow(r), nodeFromPayload);
  for (const [id, r] of plane.devices) provenance('device', id, r, 'device.observed', 'device_id', deviceFromRow(r), deviceFromPayload);
  for (const [id, r] of plane.deployments) {
    provenance('deployment', id, r, 'deployment.observed', 'deployment_id', deploymentFromRow(r, plane.replicas.get(id)), deploymentFromPayload);
  }

  // Nothing pruned wrongly: what exists in the cluster exists in Postgres.
  const snap = target.cluster.model.snapshot();
  for (const n of snap.nodes) if (!plane.nodes.has(n.node_id)) v.push(`node ${n.node_id} exists in the cluster but not in Postgres`);
  for (const d of snap.devices) if (!plane.devices.has(d.device_id)) v.push(`device ${d.device_id} exists in the cluster but not in Postgres`);
  for (const d of snap.deployments) {
    if (!plane.deployments.has(d.deployment_id)) v.push(`deployment ${d.deployment_id} exists in the cluster but not in Postgres`);
    const stored = new Set(plane.replicas.get(d.deployment_id) ?? []);
    for (const r of d.replica_ids) if (!stored.has(r)) v.push(`replica ${r} runs in the cluster but is not in Postgres`);
  }

  // Operations concluded exactly once.
  const ackedResults = new Map<string, Set<string>>();
  for (const t of taps) {
    for (const s of t.sessions.values()) {
      for (const f of s.sent.values()) {
        if (f.type !== 'operation.result' || f.seq > s.acked) continue;
        const id = String(f.payload.operation_id);
        const set = ackedResults.get(id) ?? new Set<string>();
        set.add(String(f.payload.outcome));
        ackedResults.set(id, set);
      }
    }
  }
  // An operation answered 202 and lost has no row for the checks below to look at.
  const stored = new Set(plane.operations.map((o) => o.operation_id));
  for (const id of target.operationsAccepted ?? []) if (!stored.has(id)) v.push(`operation ${id} was accepted (202) but is not stored`);
  for (const o of plane.operations) {
    if (!TERMINAL.has(o.state)) {
      v.push(`operation ${o.operation_id} never concluded (state ${o.state})`);
      continue;
    }
    if (o.state === 'deadline_exceeded') continue;
    if (o.concluded_at === null) v.push(`operation ${o.operation_id}: state ${o.state} without concluded_at`);
    const first = o.conclusions[0];
    if (!first) {
      v.push(`operation ${o.operation_id}: concluded (${o.state}) with no conclusion recorded`);
    } else {
      const firstOutcome = first.kind === 'error' ? 'failed' : first.phase;
      if (firstOutcome !== o.state) v.push(`operation ${o.operation_id}: state ${o.state}, but the first conclusion said ${String(firstOutcome)}`);
    }
    const outcomes = new Set(o.conclusions.map((c) => (c.kind === 'error' ? 'failed' : c.phase)));
    if (outcomes.size > 1) v.push(`operation ${o.operation_id}: concluded more than one way (${[...outcomes].join(', ')})`);
    const fromWire = ackedResults.get(o.operation_id);
    if (fromWire && (fromWire.size > 1 || !fromWire.has(o.state))) {
      v.push(`operation ${o.operation_id}: the hub acknowledged result(s) ${[...fromWire].join(', ')} but stores ${o.state}`);
    }
    if (target.operationsRunOnce) {
      const runs = target.cluster.operationRuns.get(o.operation_id) ?? 0;
      if (runs !== 1) v.push(`operation ${o.operation_id}: its handler ran ${runs} times in the cluster (expected exactly once)`);
    }
  }
  return v;
}

// --- waiting -----------------------------------------------------------------------------------------

export interface WaitResult {
  ok: boolean;
  ms: number;
  polls: number;
  plane: PlaneState;
  /** What still differed at the last look (empty when ok). */
  pending: string[];
}

/** Poll until plane and cluster agree and the link is quiet, or until `timeoutMs`. */
export async function waitConverged(query: Query, target: ConvergeTarget, options: { timeoutMs?: number; pollMs?: number } = {}): Promise<WaitResult> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const pollMs = options.pollMs ?? 150;
  const started = Date.now();
  let polls = 0;
  for (;;) {
    polls++;
    let pending: string[];
    let plane: PlaneState | null = null;
    try {
      plane = await readAt(query, target);
      pending = [
        ...linkNotQuiet(plane, target.cluster),
        ...diffObserved(plane, target.cluster),
        ...diffDesired(plane, target.cluster, target.expectFullPlacement ?? true),
      ];
    } catch (err) {
      pending = [`reading the plane failed: ${err instanceof Error ? err.message : String(err)}`];
    }
    const ms = Date.now() - started;
    if (plane && pending.length === 0) return { ok: true, ms, polls, plane, pending };
    if (ms >= timeoutMs) {
      return { ok: false, ms, polls, plane: plane ?? (await readAt(query, target)), pending };
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** Read the plane, noting the acks seen before the read began (see `PlaneState.acksAtRead`). */
async function readAt(query: Query, target: ConvergeTarget): Promise<PlaneState> {
  const marks = new Map<string, number>();
  for (const t of [target.cluster.tap, ...(target.otherTaps ?? [])]) for (const [id, ack] of t.ackMarks()) marks.set(id, ack);
  return { ...(await readPlane(query, target.uid)), acksAtRead: marks };
}

/** Wait for agreement, then hold the invariants; throws with the details on either failure. */
export async function converge(query: Query, target: ConvergeTarget, options: { timeoutMs?: number; pollMs?: number } = {}): Promise<ConvergeReport> {
  const w = await waitConverged(query, target, options);
  if (!w.ok) {
    throw new Error(
      `${target.cluster.name}: not converged after ${w.ms} ms (${w.pending.length} difference(s)):\n  ${w.pending.slice(0, 25).join('\n  ')}`,
    );
  }
  const violations = checkInvariants(w.plane, target);
  if (violations.length > 0) {
    throw new Error(`${target.cluster.name}: converged but ${violations.length} invariant(s) violated:\n  ${violations.slice(0, 25).join('\n  ')}`);
  }
  return report(w, target);
}

export function report(w: WaitResult, target: ConvergeTarget): ConvergeReport {
  let replicas = 0;
  for (const l of w.plane.replicas.values()) replicas += l.length;
  const e = target.cluster.tap.events();
  return {
    ms: w.ms,
    polls: w.polls,
    counts: {
      nodes: w.plane.nodes.size,
      devices: w.plane.devices.size,
      deployments: w.plane.deployments.size,
      replicas,
      events: w.plane.events.size,
      desired: [...w.plane.desired.values()].filter((r) => r.deleted !== true).length,
      operations: w.plane.operations.length,
    },
    eventsSent: e.sent.size,
    eventsAcked: e.acked.size,
  };
}
