import { z } from 'zod';
import { ERROR_CODES } from './codes';
import { HEADER_SAFE_RE, namesTime, RFC3339_RE, ULID_RE } from './envelope';
import { FAST_PAYLOADS, isHotType } from './fast-payloads';
import { fieldPath } from './field-path';
import { DEPLOYMENT_PHASES, DEVICE_HEALTH, IDENT_RE, IDENT_RULE, LIMITS, MAX_REPLICAS, RESYNC_KIND_RE, RESYNC_KINDS, RESYNC_SCOPE_MAX, SEVERITIES, TAINT_EFFECTS } from './vocabulary';

export { DEPLOYMENT_PHASES, DEVICE_HEALTH, MAX_REPLICAS, RESYNC_KINDS, SEVERITIES } from './vocabulary';

// ---------------------------------------------------------------------------------------------
// Shared field shapes. Every field here is attacker-controlled on the receiving side: bounded
// lengths and counts keep one frame's cost small and predictable. The hot operator types are also
// validated by hand (fast-payloads.ts), proven equal to these schemas by a property test: a change
// here fails that test until the hand-written validator follows.
// ---------------------------------------------------------------------------------------------

/** Identifiers of nodes, GPUs, deployments, replicas: unique within a cluster, URL-path safe. */
export const Ident = z.string().min(1).max(LIMITS.ident).regex(IDENT_RE, IDENT_RULE);
const Ulid = z.string().regex(ULID_RE, 'must be a ULID');
// The pattern admits what names no time (hour 25, minute 61): such a value is refused here, not
// carried on as NaN into a deadline or a stored record.
const Timestamp = z
  .string()
  .max(LIMITS.timestamp)
  .regex(RFC3339_RE, 'must be an RFC 3339 timestamp')
  .refine(namesTime, 'must be an RFC 3339 timestamp');
const ShortText = z.string().max(LIMITS.shortText);
const Message = z.string().max(LIMITS.message);
const Labels = z
  .record(z.string().min(1).max(LIMITS.labelKey), z.string().max(LIMITS.labelValue))
  .refine((r) => Object.keys(r).length <= LIMITS.labels, `at most ${LIMITS.labels} labels`);
const Count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const Seq = Count;

export type ResyncKind = (typeof RESYNC_KINDS)[number];

// ---------------------------------------------------------------------------------------------
// Payloads.
// ---------------------------------------------------------------------------------------------

// A resume_from without a session_id is not refused: there is no session to resume, so (as for
// a session the hub has no record of) a fresh one is granted and resume_from is not consulted.
export const HelloPayload = z.object({
  cluster_id: z.string().min(1).max(253),
  operator_version: z.string().min(1).max(128),
  session_id: z.string().min(1).max(128).nullable(),
  resume_from: Seq.nullable(),
  lossy: z.boolean(),
});

export const WelcomePayload = z.object({
  // The operator sends it back in an HTTP header (Wingsmith-Session) on every later dial: a
  // character no header may carry would make every dial fail before a socket exists.
  session_id: z
    .string()
    .min(1)
    .max(128)
    .regex(HEADER_SAFE_RE, 'must be printable ASCII without spaces (it travels in an HTTP header)'),
  ack_seq: Seq,
  full_resync: z.boolean(),
  hub_version: z.string().min(1).max(128),
  /** The region the operator reached; absent from a hub that is not regional. */
  region: z.string().min(1).max(64).optional(),
  limits: z.object({
    ping_interval_s: z.number().positive(),
    idle_timeout_s: z.number().positive(),
    max_frame_bytes: z.number().int().positive(),
    replay_buffer_frames: z.number().int().positive(),
    replay_buffer_bytes: z.number().int().positive(),
  }),
});

export const EmptyPayload = z.object({});

export const ErrorPayload = z.object({
  code: z.enum(ERROR_CODES),
  message: Message,
  retryable: z.boolean(),
  /** Set when the error answers a frame of a type the receiver does not know. */
  unknown_type: z.string().max(256).optional(),
});

export const ResyncBeginPayload = z.object({
  // Kinds this side does not know (a newer peer's) are read and pruned against by no one: refused,
  // the begin was poison, its stream never opened, and nothing of the snapshot was pruned, the
  // known kinds included, for as long as the two versions met.
  scope: z
    .array(z.string().regex(RESYNC_KIND_RE, 'a resync kind is a type prefix: lower case letters, digits, _'))
    .min(1)
    .max(RESYNC_SCOPE_MAX)
    .refine((s) => new Set(s).size === s.length, 'scope lists each kind once'),
});

export const StreamEndPayload = z.object({
  complete: z.boolean(),
  count: Count,
});

export const ClusterObservedPayload = z.object({
  kubernetes_version: ShortText,
  provider: ShortText,
  region: ShortText,
  labels: Labels,
});

const Taint = z.object({
  key: z.string().min(1).max(LIMITS.taintKey),
  value: z.string().max(LIMITS.taintValue).optional(),
  effect: z.enum(TAINT_EFFECTS),
});

export const NodeObservedPayload = z.object({
  node_id: Ident,
  name: ShortText,
  ready: z.boolean(),
  schedulable: z.boolean(),
  labels: Labels,
  taints: z.array(Taint).max(LIMITS.taints),
  allocatable: z.object({
    gpus: Count,
    cpu_millis: Count,
    memory_mb: Count,
  }),
});

export const NodeRemovedPayload = z.object({ node_id: Ident });

export const DeviceObservedPayload = z.object({
  device_id: Ident,
  node_id: Ident,
  vendor: ShortText,
  model: ShortText,
  memory_total_mb: Count,
  health: z.enum(DEVICE_HEALTH),
  driver_version: ShortText,
});

export const DeviceRemovedPayload = z.object({ device_id: Ident });

export const DeploymentObservedPayload = z
  .object({
    deployment_id: Ident,
    observed_revision: Count.nullable(),
    phase: z.enum(DEPLOYMENT_PHASES),
    ready_replicas: Count,
    replica_ids: z.array(Ident).max(MAX_REPLICAS),
    message: Message,
  })
  .refine((d) => new Set(d.replica_ids).size === d.replica_ids.length, {
    message: 'replica_ids must not repeat',
    path: ['replica_ids'],
  })
  .refine((d) => d.ready_replicas <= d.replica_ids.length, {
    message: 'ready_replicas exceeds the replicas named',
    path: ['ready_replicas'],
  });

export const DeploymentRemovedPayload = z.object({ deployment_id: Ident });

export const EventPayload = z.object({
  subject: Ident,
  reason: z.string().min(1).max(LIMITS.eventReason),
  message: Message,
  severity: z.enum(SEVERITIES),
  occurred_at: Timestamp,
});

export const ServingConfig = z.object({
  engine: z.string().min(1).max(64),
  model: z.string().min(1).max(512),
  image: z.string().min(1).max(512),
  args: z.array(z.string().max(1024)).max(128),
  env: z
    .record(z.string().min(1).max(256).regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'env names are shell identifiers'), z.string().max(4096))
    .refine((r) => Object.keys(r).length <= 128, 'at most 128 env entries'),
  gpus_per_replica: z.number().int().nonnegative().max(64),
  gpu_model: z.string().min(1).max(256).nullable(),
  port: z.number().int().min(1).max(65535),
});

export const DeploymentDesiredPayload = z
  .object({
    deployment_id: Ident,
    workload_id: Ident,
    revision: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
    min_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
    max_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
    serving: ServingConfig.nullable(),
    deleted: z.boolean(),
  })
  .refine((d) => d.min_replicas <= d.max_replicas, {
    message: 'min_replicas exceeds max_replicas',
    path: ['min_replicas'],
  })
  .refine((d) => d.deleted || d.serving !== null, { message: 'serving is required unless deleted', path: ['serving'] });

export const OPERATION_KINDS = ['node.drain', 'node.cordon', 'node.uncordon', 'replica.restart', 'model.prefetch'] as const;
export type OperationKind = (typeof OPERATION_KINDS)[number];

export const OperationParams = z
  .record(z.string().min(1).max(64), z.union([z.string().max(1024), z.number(), z.boolean(), z.null()]))
  .refine((r) => Object.keys(r).length <= 32, 'at most 32 params');

export const OperationStartPayload = z.object({
  operation_id: Ulid,
  kind: z.enum(OPERATION_KINDS),
  /** A node id, a replica id or a model name, depending on kind. */
  target: z.string().min(1).max(512),
  params: OperationParams,
  deadline: Timestamp,
});

export const OperationAcceptedPayload = z.object({ operation_id: Ulid });

export const OperationProgressPayload = z.object({
  operation_id: Ulid,
  phase: z.string().min(1).max(64),
  message: Message,
});

export const OPERATION_OUTCOMES = ['succeeded', 'failed', 'cancelled'] as const;

export const OperationResultPayload = z.object({
  operation_id: Ulid,
  outcome: z.enum(OPERATION_OUTCOMES),
  message: Message,
});

export const LinkStatsPayload = z.object({
  /** Identifies one run of the operator process; counters restart at zero with a new epoch. */
  epoch: Ulid,
  dropped_events: Count,
  evicted_frames: Count,
  replaced_frames: Count,
  /**
   * Attempts to apply a hub frame that failed transiently (the application's handler threw, or
   * said `transient`); each is withheld and retried. Optional: an operator one version behind
   * does not send it.
   */
  handler_failures: Count.optional(),
  /**
   * `operation.progress` reports dropped because the send queue had no room for them (they are
   * informational: the operation's conclusion is never dropped). Optional, as handler_failures.
   */
  dropped_progress: Count.optional(),
});

// ---------------------------------------------------------------------------------------------
// The catalog: one entry per type.
// ---------------------------------------------------------------------------------------------

export type Direction = 'op->hub' | 'hub->op' | 'both';

/**
 * How a frame behaves in the operator's coalescing send queue:
 * - `state`: a snapshot of the present; replaced by a newer frame with the same key when full.
 * - `event`: dropped from the tail (and counted) when full.
 * - `control`: never replaced or evicted (resync framing, errors, operations).
 */
export type QueueClass = 'state' | 'event' | 'control';

interface CatalogEntry<S extends z.ZodType> {
  schema: S;
  direction: Direction;
  sequenced: boolean;
  queue: QueueClass;
  /** Coalescing key for `state` frames (shared by `<kind>.observed` and `<kind>.removed`). */
  key?: (payload: z.output<S>) => string;
}

function entry<S extends z.ZodType>(e: CatalogEntry<S>): CatalogEntry<S> {
  return e;
}

export const CATALOG = {
  hello: entry({ schema: HelloPayload, direction: 'op->hub', sequenced: false, queue: 'control' }),
  welcome: entry({ schema: WelcomePayload, direction: 'hub->op', sequenced: false, queue: 'control' }),
  ping: entry({ schema: EmptyPayload, direction: 'both', sequenced: false, queue: 'control' }),
  pong: entry({ schema: EmptyPayload, direction: 'both', sequenced: false, queue: 'control' }),
  ack: entry({ schema: EmptyPayload, direction: 'both', sequenced: false, queue: 'control' }),
  error: entry({ schema: ErrorPayload, direction: 'both', sequenced: true, queue: 'control' }),
  'resync.begin': entry({ schema: ResyncBeginPayload, direction: 'both', sequenced: true, queue: 'control' }),
  'stream.end': entry({ schema: StreamEndPayload, direction: 'both', sequenced: true, queue: 'control' }),
  'cluster.observed': entry({
    schema: ClusterObservedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: () => 'cluster',
  }),
  'node.observed': entry({
    schema: NodeObservedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `node/${p.node_id}`,
  }),
  'node.removed': entry({
    schema: NodeRemovedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `node/${p.node_id}`,
  }),
  'device.observed': entry({
    schema: DeviceObservedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `device/${p.device_id}`,
  }),
  'device.removed': entry({
    schema: DeviceRemovedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `device/${p.device_id}`,
  }),
  'deployment.observed': entry({
    schema: DeploymentObservedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `deployment/${p.deployment_id}`,
  }),
  'deployment.removed': entry({
    schema: DeploymentRemovedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: (p) => `deployment/${p.deployment_id}`,
  }),
  'node.event': entry({ schema: EventPayload, direction: 'op->hub', sequenced: true, queue: 'event' }),
  'device.event': entry({ schema: EventPayload, direction: 'op->hub', sequenced: true, queue: 'event' }),
  'deployment.event': entry({ schema: EventPayload, direction: 'op->hub', sequenced: true, queue: 'event' }),
  'link.stats': entry({
    schema: LinkStatsPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'state',
    key: () => 'link',
  }),
  'deployment.desired': entry({
    schema: DeploymentDesiredPayload,
    direction: 'hub->op',
    sequenced: true,
    queue: 'control',
  }),
  'operation.start': entry({ schema: OperationStartPayload, direction: 'hub->op', sequenced: true, queue: 'control' }),
  'operation.accepted': entry({
    schema: OperationAcceptedPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'control',
  }),
  'operation.progress': entry({
    schema: OperationProgressPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'control',
  }),
  'operation.result': entry({
    schema: OperationResultPayload,
    direction: 'op->hub',
    sequenced: true,
    queue: 'control',
  }),
} as const;

export type MessageType = keyof typeof CATALOG;
export const MESSAGE_TYPES = Object.keys(CATALOG) as MessageType[];
export type Payload<T extends MessageType> = z.output<(typeof CATALOG)[T]['schema']>;

export function isKnownType(type: string): type is MessageType {
  return Object.prototype.hasOwnProperty.call(CATALOG, type);
}

export function isResyncKind(kind: string): kind is ResyncKind {
  return (RESYNC_KINDS as readonly string[]).includes(kind);
}

/** A scope's kinds this side knows, in order; the rest are a newer peer's, pruned by no one here. */
export function knownResyncKinds(scope: readonly string[]): { known: ResyncKind[]; unknown: string[] } {
  const known: ResyncKind[] = [];
  const unknown: string[] = [];
  for (const kind of scope) {
    if (isResyncKind(kind)) known.push(kind);
    else unknown.push(kind);
  }
  return { known, unknown };
}

/** The kind a type belongs to for resync scopes (`node.observed` → `node`), if any. */
export function resyncKindOf(type: string): ResyncKind | null {
  const dot = type.indexOf('.');
  // No dot, no kind: `nodes` is not of kind `node`.
  return dot > 0 && isResyncKind(type.slice(0, dot)) ? (type.slice(0, dot) as ResyncKind) : null;
}

/** A frame whose payload has been decoded against the catalog. */
export type TypedMessage = { [T in MessageType]: { type: T; payload: Payload<T> } }[MessageType];

export type PayloadDecode =
  | { ok: true; message: TypedMessage }
  | { ok: false; unknownType: true; reason: string }
  | { ok: false; unknownType: false; reason: string };

/**
 * Decode a payload against its type's schema. Never throws; unknown fields are stripped. `payload`
 * is a parsed JSON value: the hot operator types go through hand-written validators proven equal
 * to their schemas on exactly that domain (fast-payloads.ts), every other type through zod.
 */
export function decodePayload(type: string, payload: unknown): PayloadDecode {
  if (!isKnownType(type)) return { ok: false, unknownType: true, reason: `unknown message type ${type}` };
  if (isHotType(type)) {
    const fast = FAST_PAYLOADS[type](payload);
    if (!fast.ok) return { ok: false, unknownType: false, reason: `${type} ${fast.field}: ${fast.message}` };
    return { ok: true, message: { type, payload: fast.value } as TypedMessage };
  }
  return decodePayloadWithZod(type, payload);
}

/** The schema's own verdict, for every type: the reference the fast validators are tested against. */
export function decodePayloadWithZod(type: MessageType, payload: unknown): PayloadDecode {
  const parsed = CATALOG[type].schema.safeParse(payload);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // A record's key is the sender's text: cut, as the fast validators cut it (field-path.ts).
    const field = issue ? fieldPath(issue.path) : 'payload';
    return { ok: false, unknownType: false, reason: `${type} ${field}: ${issue?.message ?? 'invalid'}` };
  }
  return { ok: true, message: { type, payload: parsed.data } as TypedMessage };
}

/** The coalescing key of a decoded frame, or null when its type is not coalesced. */
export function coalescingKey(message: TypedMessage): string | null {
  const e = CATALOG[message.type] as CatalogEntry<z.ZodType>;
  return e.key ? e.key(message.payload) : null;
}

export function queueClassOf(type: string): QueueClass {
  if (isKnownType(type)) return CATALOG[type].queue;
  return type.endsWith('.event') ? 'event' : 'control';
}
