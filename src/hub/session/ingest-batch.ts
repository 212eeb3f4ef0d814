/**
 * Turning a run of accepted operator frames into one set-based write. Pure: the same frames and
 * resync state always give the same batch, so a failed batch can be rebuilt and retried, or
 * split to find a frame the database refuses.
 */
import { asciiText, holdsUnstorableText, storableText } from '../storable-text';
import { CATALOG, knownResyncKinds, type Payload, type ResyncKind, type TypedMessage } from '../../protocol';
import type { IngestBatch, OperationEvent, OperationUpdate, Rejection, WithSeq } from '../db/ingest';
import { countOnce, describesPruned, MAX_OPEN_RESYNCS, openStream } from './ingest-streams';
import type { OpResync } from './store';

export type { DesiredRefusal, IngestBatch, OperationEvent, OperationUpdate, Prune, Rejection } from '../db/ingest';

interface ItemBase {
  seq: number;
  id: string;
  replyTo: string | null;
  type: string;
  /** Date.now() when it arrived: the age of the oldest unapplied frame bounds a hole. */
  arrivedAt: number;
  /** The frame's length as received (UTF-16 units): what bounds a statement's and the queue's size. */
  bytes?: number;
  /**
   * How plainly a poison or unknown frame's rejection is recorded; absent: in full. Only the
   * ingest pipeline sets it, one step down each time the database refuses the record (see
   * `plainerRecord`), so a refusal never queues the same item again.
   */
  record?: RecordLevel;
}

/**
 * - `minimal`: ASCII only, the operator's text escaped and cut short: nothing in it can be refused
 *   as text or jsonb.
 * - `none`: nothing is written for the frame (it is still acknowledged, and was logged loudly).
 */
export type RecordLevel = 'minimal' | 'none';

export type InboundItem =
  | (ItemBase & { kind: 'message'; message: TypedMessage })
  | (ItemBase & { kind: 'poison'; reason: string })
  | (ItemBase & { kind: 'unknown' });

/** Which deployment a frame the hub sent carried, if it was a deployment.desired. */
export type SentDesiredLookup = (frameId: string) => { deploymentId: string; revision: number } | null;

export interface StreamNote {
  beginId: string;
  seq: number;
  complete: boolean;
  reason: string | null;
  /** Kinds its scope named that this hub does not know (a newer operator's): pruned by no one here. */
  unknownKinds?: string[];
}

export interface BuiltBatch {
  batch: IngestBatch;
  /** Resync state once this batch is applied. */
  resyncs: Record<string, OpResync>;
  streams: StreamNote[];
  /** Sequenced error frames from the operator (logged, never fatal). */
  peerErrors: { seq: number; replyTo: string | null; payload: Payload<'error'> }[];
  /**
   * Well-formed frames refused here (a type only the hub sends, a stream.end for no open stream):
   * poison like a malformed one, so logged as loudly once committed (poison and unknown types
   * are logged from their items).
   */
  refused: { seq: number; type: string; id: string; reason: string }[];
  /**
   * Where this batch hides from Postgres a row it may refuse (text it cannot hold), or null: the
   * seq of the first frame that replaces such a frame about the same subject, or of the
   * resync.begin whose prune drops it unwritten. The statement would not carry that row, so the
   * database could never refuse it and the frame would be acknowledged with no record (spec
   * "Poison frames"). The pipeline ends the batch before that seq instead. Only a replaced or
   * pruned row's text is looked at: a batch with one frame per subject pays a map lookup a row.
   */
  hidesRefusable: number | null;
}

/** Types the operator may send as sequenced frames. */
const OPERATOR_TYPES = new Set(
  Object.entries(CATALOG)
    .filter(([, e]) => e.sequenced && (e.direction === 'op->hub' || e.direction === 'both'))
    .map(([t]) => t),
);

/**
 * Whether a frame is known, as it arrives, to be answered once its batch commits: an unknown
 * type, a poison frame, a type no operator sends (the cap on answers owed counts it from then).
 */
export function answeredOnCommit(item: InboundItem): boolean {
  return item.kind !== 'message' || !OPERATOR_TYPES.has(item.type);
}

export function emptyBatch(): IngestBatch {
  return {
    cluster: null,
    nodes: [],
    nodeDeletes: [],
    devices: [],
    deviceDeletes: [],
    deployments: [],
    deploymentDeletes: [],
    events: [],
    linkStats: null,
    operationUpdates: [],
    operationEvents: [],
    rejections: [],
    desiredRefusals: [],
    prunes: [],
  };
}

export function batchIsEmpty(b: IngestBatch): boolean {
  return (
    b.cluster === null &&
    b.nodes.length + b.nodeDeletes.length + b.devices.length + b.deviceDeletes.length === 0 &&
    b.deployments.length + b.deploymentDeletes.length + b.events.length === 0 &&
    b.linkStats === null &&
    b.operationUpdates.length + b.operationEvents.length + b.rejections.length + b.prunes.length === 0 &&
    b.desiredRefusals.length === 0
  );
}

/**
 * Within one statement a row can be written once, so the last statement about each subject wins
 * (observed state is a snapshot of the present: the latest is the truth).
 */
/** A subject removed in the batch (a value is never a symbol: payloads are objects). */
const REMOVED: unique symbol = Symbol('removed');

class LastWins<T extends object> {
  // The value itself, not a record around it: one object less per frame on the ingest path.
  private readonly map = new Map<string, T | typeof REMOVED>();
  // Overwritten in place: each subject is one row of a set-based statement, so where it sits
  // among the others does not matter (moving it to the end cost a delete per frame).
  /** Returns the value this replaces in the batch, if any. */
  upsert(id: string, value: T): T | undefined {
    const prev = this.map.get(id);
    this.map.set(id, value);
    return prev === REMOVED ? undefined : prev;
  }
  remove(id: string): T | undefined {
    const prev = this.map.get(id);
    this.map.set(id, REMOVED);
    return prev === REMOVED ? undefined : prev;
  }
  split(): { upserts: T[]; deletes: string[] } {
    const upserts: T[] = [];
    const deletes: string[] = [];
    for (const [id, v] of this.map) {
      if (v === REMOVED) deletes.push(id);
      else upserts.push(v);
    }
    return { upserts, deletes };
  }
}

export function buildBatch(
  items: readonly InboundItem[],
  resyncsIn: Record<string, OpResync>,
  sentDesired: SentDesiredLookup = () => null,
): BuiltBatch {
  const resyncs: Record<string, OpResync> = {};
  for (const [k, v] of Object.entries(resyncsIn)) {
    resyncs[k] = { ...v, scope: [...v.scope], ...(v.counted ? { counted: v.counted.map(([a, b]) => [a, b] as [number, number]) } : {}) };
  }
  const batch = emptyBatch();
  const streams: StreamNote[] = [];
  const peerErrors: BuiltBatch['peerErrors'] = [];
  const refused: BuiltBatch['refused'] = [];
  const nodes = new LastWins<WithSeq<Payload<'node.observed'>>>();
  const devices = new LastWins<WithSeq<Payload<'device.observed'>>>();
  const deployments = new LastWins<WithSeq<Payload<'deployment.observed'>>>();
  const ops = new Map<string, OperationUpdate>();
  const op = (id: string): OperationUpdate => {
    let u = ops.get(id);
    if (!u) {
      u = { operation_id: id, accepted: false, progressed: false, outcome: null, message: null, outcome_seq: null };
      ops.set(id, u);
    }
    return u;
  };
  const reject = (item: InboundItem, reason: string, answer = true) => {
    const record = rejectionRecord(item, reason, answer);
    if (record) batch.rejections.push(record);
    if (item.kind === 'message') refused.push({ seq: item.seq, type: item.type, id: item.id, reason });
  };
  let hidesRefusable: number | null = null;
  // Called only when a frame replaces another (a row this statement will not carry).
  const supersedes = (item: InboundItem, replaced: object) => {
    if (hidesRefusable === null && holdsUnstorableText(replaced)) hidesRefusable = item.seq;
  };

  for (const item of items) {
    // Count stream membership first: count is frames carried between begin and end.
    const stream = item.type !== 'stream.end' ? openStream(resyncs, item.replyTo) : undefined;
    if (stream && countOnce(stream, item.seq)) stream.count++;

    if (item.kind === 'poison') {
      reject(item, item.reason);
      if (stream) stream.tainted = true;
      continue;
    }
    if (item.kind === 'unknown') {
      reject(item, `unknown message type ${item.type}`, false);
      // Only a type of a kind the stream prunes leaves that kind's snapshot unknown: one of
      // another kind (a newer operator's, the skew unknown types are harmless for) says nothing
      // of it, and tainting the stream for it stopped every prune while the versions met.
      if (stream && describesPruned(stream, item.type)) stream.tainted = true;
      continue;
    }
    if (!OPERATOR_TYPES.has(item.type)) {
      reject(item, `${item.type} is not sent by an operator`);
      if (stream) stream.tainted = true;
      continue;
    }

    const m = item.message;
    // Human-readable text (messages, an event's reason, an operation's phase) is mended, not
    // refused: a state or an operation's conclusion must not be lost to a NUL or half an emoji in
    // its message. Other fields the database refuses still make the frame poison.
    switch (m.type) {
      case 'cluster.observed':
        if (batch.cluster !== null) supersedes(item, batch.cluster);
        batch.cluster = { ...m.payload, seq: item.seq };
        break;
      case 'node.observed': {
        const replaced = nodes.upsert(m.payload.node_id, { ...m.payload, seq: item.seq });
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'node.removed': {
        const replaced = nodes.remove(m.payload.node_id);
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'device.observed': {
        const replaced = devices.upsert(m.payload.device_id, { ...m.payload, seq: item.seq });
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'device.removed': {
        const replaced = devices.remove(m.payload.device_id);
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'deployment.observed': {
        const replaced = deployments.upsert(m.payload.deployment_id, { ...m.payload, message: storableText(m.payload.message, 2048), seq: item.seq });
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'deployment.removed': {
        const replaced = deployments.remove(m.payload.deployment_id);
        if (replaced !== undefined) supersedes(item, replaced);
        break;
      }
      case 'node.event':
      case 'device.event':
      case 'deployment.event':
        batch.events.push({
          frame_id: item.id,
          kind: m.type.slice(0, m.type.indexOf('.')),
          ...m.payload,
          reason: storableText(m.payload.reason, 128),
          message: storableText(m.payload.message, 2048),
          seq: item.seq,
        });
        break;
      case 'link.stats':
        if (batch.linkStats !== null) supersedes(item, batch.linkStats);
        batch.linkStats = m.payload;
        break;
      case 'operation.accepted':
        op(m.payload.operation_id).accepted = true;
        batch.operationEvents.push(opEvent(item, m.payload.operation_id, 'accepted', null, ''));
        break;
      case 'operation.progress':
        op(m.payload.operation_id).progressed = true;
        batch.operationEvents.push(opEvent(item, m.payload.operation_id, 'progress', storableText(m.payload.phase, 64), m.payload.message));
        break;
      case 'operation.result': {
        const u = op(m.payload.operation_id);
        // The first result concludes; a redelivered one changes nothing.
        if (u.outcome === null) {
          u.outcome = m.payload.outcome;
          u.message = storableText(m.payload.message, 2048);
          u.outcome_seq = item.seq;
        }
        batch.operationEvents.push(opEvent(item, m.payload.operation_id, 'result', m.payload.outcome, m.payload.message));
        break;
      }
      case 'error': {
        peerErrors.push({ seq: item.seq, replyTo: item.replyTo, payload: m.payload });
        const refused = item.replyTo !== null ? sentDesired(item.replyTo) : null;
        if (refused) {
          batch.desiredRefusals.push({
            deployment_id: refused.deploymentId,
            revision: refused.revision,
            code: m.payload.code,
            message: storableText(m.payload.message, 2048),
            seq: item.seq,
          });
        } else if (item.replyTo !== null) {
          batch.operationEvents.push({
            operation_id: null,
            reply_to: item.replyTo,
            frame_id: item.id,
            kind: 'error',
            phase: m.payload.code,
            message: storableText(m.payload.message, 2048),
            seq: item.seq,
          });
        }
        break;
      }
      case 'resync.begin': {
        // Open streams are kept in the session's record, rewritten with every batch: an operator
        // that begins streams and never ends them must not grow it without bound. The oldest
        // gives way (ended incomplete: nothing is pruned against it), so a new resync is always
        // admitted.
        const open = Object.keys(resyncs);
        if (!Object.hasOwn(resyncs, item.id) && open.length >= MAX_OPEN_RESYNCS) {
          const oldest = open.reduce((a, b) => ((resyncs[a] as OpResync).beginSeq <= (resyncs[b] as OpResync).beginSeq ? a : b));
          delete resyncs[oldest];
          streams.push({ beginId: oldest, seq: item.seq, complete: false, reason: `superseded: more than ${MAX_OPEN_RESYNCS} resync streams open at once` });
        }
        resyncs[item.id] = { beginSeq: item.seq, scope: [...m.payload.scope], count: 0, tainted: false, counted: [], beganAt: item.arrivedAt };
        break;
      }
      case 'stream.end': {
        const open = openStream(resyncs, item.replyTo);
        if (!open || item.replyTo === null) {
          reject(item, 'stream.end for a stream that is not open');
          break;
        }
        delete resyncs[item.replyTo];
        let reason: string | null = null;
        if (!m.payload.complete) reason = 'sender marked the stream incomplete';
        else if (m.payload.count !== open.count) reason = `count ${m.payload.count} but ${open.count} frames carried`;
        else if (open.tainted) reason = 'a frame inside the stream was rejected';
        // A kind this hub does not know (a newer operator's) is pruned by no one here.
        const { known, unknown } = knownResyncKinds(open.scope);
        if (reason === null) for (const kind of known) batch.prunes.push({ kind, begin_seq: open.beginSeq });
        streams.push({ beginId: item.replyTo, seq: item.seq, complete: reason === null, reason, ...(unknown.length > 0 ? { unknownKinds: unknown } : {}) });
        break;
      }
      default:
        // Hub→operator types were rejected above; nothing else reaches here.
        reject(item, `${m.type} is not sent by an operator`);
    }
  }

  const n = nodes.split();
  const d = devices.split();
  const dep = deployments.split();
  // A complete snapshot in this batch supersedes what this batch said before its begin: the
  // statement spares every subject it writes, so a subject last written before the begin (and
  // not carried since) must not be written at all, and the prune removes its row.
  const survives = (kind: ResyncKind) => {
    const begin = Math.max(0, ...batch.prunes.filter((x) => x.kind === kind).map((x) => x.begin_seq));
    return (x: { seq: number }) => {
      if (x.seq > begin) return true;
      // Hidden as a replaced frame is: the batch must end before the begin for Postgres to see it.
      if (holdsUnstorableText(x) && (hidesRefusable === null || begin < hidesRefusable)) hidesRefusable = begin;
      return false;
    };
  };
  batch.nodes = n.upserts.filter(survives('node'));
  batch.nodeDeletes = n.deletes;
  batch.devices = d.upserts.filter(survives('device'));
  batch.deviceDeletes = d.deletes;
  batch.deployments = dep.upserts.filter(survives('deployment'));
  batch.deploymentDeletes = dep.deletes;
  if (batch.cluster && !survives('cluster')(batch.cluster)) batch.cluster = null;
  batch.operationUpdates = [...ops.values()];
  return { batch, resyncs, streams, peerErrors, refused, hidesRefusable };
}

/**
 * The row a rejected frame leaves in `rejections`, at the plainness its item asks for, or null
 * when nothing is to be written.
 */
export function rejectionRecord(item: InboundItem, reason: string, answer: boolean): Rejection | null {
  switch (item.record) {
    case 'none':
      return null;
    case 'minimal':
      return {
        seq: item.seq,
        frame_id: item.id ? asciiText(item.id, 64) : null,
        type: asciiText(item.type, 64),
        reason: `${MINIMAL_NOTE}: ${asciiText(reason, 512)}`,
        answer,
      };
    default:
      return {
        seq: item.seq,
        frame_id: item.id ? storableText(item.id, 64) : null,
        type: storableText(item.type, 256),
        reason: storableText(reason, 2048),
        answer,
      };
  }
}

const MINIMAL_NOTE = 'rejection record reduced to ASCII (the database refused it whole)';

/**
 * The item to queue instead of a poison or unknown frame whose rejection record the database
 * refused: the same frame, recorded one step more plainly. The last step writes nothing, so
 * the ladder ends in an acknowledgement whatever the database makes of the text.
 */
export function plainerRecord(item: InboundItem): InboundItem {
  return { ...item, record: item.record === undefined ? 'minimal' : 'none' };
}

/**
 * Whether the hub writes nothing for this item: a statement of such items alone that the
 * database refuses "permanently" was refused for something other than the frame's content.
 */
export function writesNothing(item: InboundItem): boolean {
  return item.kind !== 'message' && item.record === 'none';
}

function opEvent(
  item: InboundItem,
  operationId: string,
  kind: OperationEvent['kind'],
  phase: string | null,
  message: string,
): OperationEvent {
  return { operation_id: operationId, reply_to: null, frame_id: item.id, kind, phase, message: storableText(message, 2048), seq: item.seq };
}
