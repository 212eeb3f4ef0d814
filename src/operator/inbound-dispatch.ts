/**
 * What the SDK does with one in-order frame from the hub: the decision table of the operator's
 * receive side, kept apart from connection handling so it reads as a list of rules.
 *
 * Every branch ends in a settlement of the frame's seq:
 * - `applied`: acknowledged;
 * - `dropped`: acknowledged too (unknown type, poison frame, permanent handler failure): the seq
 *   is consumed so the stream behind it is not wedged; the drop is logged loudly and answered
 *   with an `error` frame (`retryable: false`, `reply_to` = the frame's id);
 * - `failed`: transient; the ack is withheld and the frame retried. Its cause is the
 *   application's handler (it threw, or said `transient`: counted in `link.stats`) or
 *   backpressure (the send queue has no room for the answer the frame may need).
 */
import { cutText, knownResyncKinds, resyncKindOf, ULID_RE, type Envelope, type ErrorCode, type Incoming, type Payload } from '../protocol';
import { runHandler, type FrameContext, type HandlerResult, type OperatorHandlers } from './handlers';
import type { Logger } from './logger';
import type { OperationBook, StartSettlement } from './operations';
import { outItem, type OutItem } from './outgoing';
import type { InboundResyncs } from './resync';
import type { AppliedRevisions } from './applied-revisions';

export type Settled =
  | { settle: 'applied' }
  /** `retryBy`: retry no later than this (wall clock), whatever the backoff says. */
  | { settle: 'failed'; reason: string; cause: 'handler' | 'backpressure' | 'internal'; retryBy?: number }
  /** Already answered (error frame queued) and logged. */
  | { settle: 'dropped'; reason: string };

export interface DispatchHost {
  /** Whether the session this frame was dispatched in is still this client's (not replaced by a fresh one). */
  current(): boolean;
  readonly handlers: OperatorHandlers;
  readonly book: OperationBook;
  readonly streams: InboundResyncs;
  /** Highest `deployment.desired.revision` applied per deployment in this session. */
  readonly appliedRevision: AppliedRevisions;
  readonly logger: Logger;
  send(item: OutItem): void;
  /** Whether the send queue has room for this frame's answer (an error or operation.accepted). */
  canReply(): boolean;
  hubError(payload: Payload<'error'>, envelope: Envelope): void;
  pruned(keep: ReadonlySet<string>): void;
  readonly counters: DispatchCounters;
}

export interface DispatchCounters {
  unknownTypes: number;
  poisonFrames: number;
  permanentFailures: number;
  hubErrors: number;
  supersededDesired: number;
  /** Transient failures of the application's handlers (a throw, or `transient`), per attempt. */
  handlerFailures: number;
}

const MESSAGE_MAX = 2048;
const UNKNOWN_TYPE_MAX = 256;

/** An `error` frame answering `envelope`, refusing it for good. */
export function refusal(envelope: Envelope, code: ErrorCode, message: string, unknownType?: string): OutItem {
  const text = message.length > MESSAGE_MAX ? cutText(message, MESSAGE_MAX - 1) + '…' : message;
  return outItem(
    'error',
    // The type as the hub wrote it may be any string, but the error's field holds 256 characters:
    // longer, and the hub would read this answer as a poison frame of ours.
    { code, message: text, retryable: false, ...(unknownType !== undefined ? { unknown_type: cutText(unknownType, UNKNOWN_TYPE_MAX) } : {}) },
    // reply_to must be a ULID; a poison frame's own id may not be one.
    ULID_RE.test(envelope.id) ? envelope.id : null,
    envelope.seq !== null ? { answers: envelope.seq } : {},
  );
}

function fromHandler(host: DispatchHost, envelope: Envelope, r: HandlerResult, what: string): Settled {
  if (r.ok) return { settle: 'applied' };
  if (r.retryable) {
    host.counters.handlerFailures++;
    return { settle: 'failed', reason: r.reason, cause: 'handler' };
  }
  host.counters.permanentFailures++;
  host.logger.error(`${what} failed permanently: accepted, acknowledged and dropped`, {
    seq: envelope.seq,
    type: envelope.type,
    id: envelope.id,
    reason: r.reason,
  });
  host.send(refusal(envelope, r.code ?? 'invalid', r.reason));
  return { settle: 'dropped', reason: r.reason };
}

/**
 * What `dispatch` answers: a settlement, or an operation start recorded and waiting for the save
 * that makes it durable (`durable` settles it then; see `OperationBook.accept`).
 */
export type Dispatched = Settled | { settle: 'recorded'; durable: Promise<Settled> };

export async function dispatch(host: DispatchHost, incoming: Exclude<Incoming, { kind: 'fatal' }>, attempt: number): Promise<Dispatched> {
  const env = incoming.envelope;
  const seq = env.seq as number;
  const inStream = host.streams.has(env.reply_to);
  // A frame is part of its stream whatever becomes of it: a begin opens it and a member is
  // counted (once, by seq) before the frame may be withheld for room below, so a snapshot's
  // framing and count never depend on the send queue. A begin needs no answer, so it is applied.
  if (incoming.kind === 'message') {
    const m = incoming.message;
    if (m.type === 'resync.begin') {
      // A kind this SDK does not know is a newer hub's: its frames are answered as unknown types
      // and counted, and the kinds it knows are pruned as ever.
      const { known, unknown } = knownResyncKinds(m.payload.scope);
      host.streams.begin(env.id, known, seq);
      host.logger.info('hub resync stream opened', { seq, id: env.id, scope: m.payload.scope });
      if (unknown.length > 0) host.logger.warn('hub resync names kinds this operator does not know: they are not pruned here (a newer hub)', { seq, id: env.id, unknown });
      return { settle: 'applied' };
    }
    if (inStream && m.type === 'deployment.desired') host.streams.carry(env.reply_to as string, seq, m.payload.deployment_id);
    // A change sent after a snapshot may be applied before that snapshot's prune (retried after a
    // transient failure): the prune must not remove it.
    if (m.type === 'deployment.desired') host.streams.mentioned(inStream ? env.reply_to : null, m.payload.deployment_id, seq);
    if (inStream && m.type === 'operation.start') host.streams.carry(env.reply_to as string, seq, null);
  } else if (inStream) {
    // Only a frame that could describe a deployment keeps the snapshot from pruning deployments
    // (the only kind this side prunes): an unreadable one leaves what the snapshot holds unknown.
    // A type of another kind (one a newer plane streams, the skew the spec keeps unknown types
    // harmless for) or an unreadable operation start says nothing of them, and is counted.
    if (resyncKindOf(env.type) === 'deployment') host.streams.unreadable(env.reply_to as string, seq);
    else host.streams.carry(env.reply_to as string, seq, null);
  }
  // Every frame may need an answer; none is applied that could not have one queued.
  if (!host.canReply()) return { settle: 'failed', reason: 'the send queue has no room for control frames', cause: 'backpressure' };

  if (incoming.kind === 'unknown') {
    host.counters.unknownTypes++;
    host.logger.warn('frame of an unknown type from the hub: dropped and answered', { seq, type: env.type, id: env.id });
    host.send(refusal(env, 'invalid', `unknown message type ${env.type}`, env.type));
    return { settle: 'dropped', reason: `unknown type ${env.type}` };
  }

  if (incoming.kind === 'poison') {
    host.counters.poisonFrames++;
    host.logger.error('poison frame from the hub: accepted, acknowledged and dropped', {
      seq,
      type: env.type,
      id: env.id,
      reply_to: env.reply_to,
      reason: incoming.reason,
    });
    host.send(refusal(env, 'invalid', incoming.reason));
    // An unreadable end still ends its snapshot, unpruned: left open, the record would say a
    // snapshot was under way, and every restart would go lossy until sixteen more pushed it out.
    if (inStream && env.type === 'stream.end') host.streams.close(env.reply_to);
    return { settle: 'dropped', reason: incoming.reason };
  }

  const msg = incoming.message;
  const ctx: FrameContext = { frameId: env.id, seq, resyncId: inStream ? env.reply_to : null, attempt };
  switch (msg.type) {
    case 'error': {
      // Never fatal to an established session, whatever `retryable` says.
      host.counters.hubErrors++;
      host.logger.warn('error frame from the hub', { seq, reply_to: env.reply_to, ...msg.payload });
      host.hubError(msg.payload, env);
      return { settle: 'applied' };
    }
    case 'stream.end':
      return endOfStream(host, env, msg.payload, ctx);
    case 'deployment.desired': {
      const p = msg.payload;
      if (host.appliedRevision.prunedAfter(p.deployment_id, seq)) {
        // Older than a complete snapshot that withdrew the deployment (a retry of a frame that
        // failed before its begin): the snapshot says what holds.
        host.counters.supersededDesired++;
        host.logger.debug('deployment.desired older than the snapshot that withdrew it skipped', { seq, deployment_id: p.deployment_id, revision: p.revision });
        return { settle: 'applied' };
      }
      const seen = host.appliedRevision.get(p.deployment_id);
      if (seen !== undefined && p.revision <= seen) {
        // A replay, or a retry overtaken by a newer revision: applying it would go backwards.
        host.counters.supersededDesired++;
        host.logger.debug('deployment.desired at or below an applied revision skipped', {
          seq,
          deployment_id: p.deployment_id,
          revision: p.revision,
          applied: seen,
        });
        return { settle: 'applied' };
      }
      // The handler gets the payload exactly as decoded: bounds are rendered as sent.
      const r = await runHandler(() => host.handlers.desired(p, ctx));
      // A fresh session began while the handler ran (its link was cut): the revision belongs to
      // the old numbering, and recorded in the new session it would skip the new snapshot's own
      // revision of the deployment (lower after a database restore). Its link has ended, so
      // nothing settles it; the snapshot says what holds.
      if (!host.current()) return { settle: 'failed', reason: 'its session was replaced while the handler ran', cause: 'internal' };
      if (r.ok) host.appliedRevision.applied(p.deployment_id, p.revision, seq, p.deleted);
      return fromHandler(host, env, r, 'deployment.desired');
    }
    case 'operation.start': {
      const r = await host.book.accept(msg.payload, ctx);
      const settled = (r: StartSettlement): Settled => {
        if (r.settle === 'dropped') {
          host.counters.permanentFailures++;
          host.logger.error('operation refused permanently', { seq, id: env.id, operation_id: msg.payload.operation_id, reason: r.reason });
        }
        if (r.settle === 'failed') {
          host.counters.handlerFailures++;
          return { ...r, cause: 'handler' };
        }
        return r;
      };
      return r.settle === 'recorded' ? { settle: 'recorded', durable: r.durable.then(settled) } : settled(r);
    }
    default: {
      // A type this side knows but the hub never sends (an operator→hub type).
      if (inStream) host.streams.unreadable(env.reply_to as string, seq);
      return fromHandler(host, env, { ok: false, retryable: false, reason: `${msg.type} is not a hub-to-operator message`, code: 'invalid' }, msg.type);
    }
  }
}

async function endOfStream(host: DispatchHost, env: Envelope, end: Payload<'stream.end'>, ctx: FrameContext): Promise<Settled> {
  const verdict = host.streams.judge(env.reply_to, end);
  if (!verdict.prune) {
    host.logger.warn('hub snapshot ended without a prune', { seq: env.seq, reply_to: env.reply_to, reason: verdict.reason });
    host.streams.close(env.reply_to);
    return { settle: 'applied' };
  }
  if (!verdict.scope.includes('deployment')) {
    host.streams.close(env.reply_to);
    return { settle: 'applied' };
  }
  // What was applied from frames numbered after the begin is newer than the snapshot, whether the
  // stream saw it go by or not: a resume that replays a stream already pruned (its begin behind a
  // hole) meets the frames after its end only after the end, and pruned them meanwhile (the
  // deployment's replicas torn down, then put back by the replay a moment later).
  const after = host.appliedRevision.appliedAfter(verdict.beginSeq).filter((id) => !verdict.keepDeployments.has(id));
  const keep = after.length === 0 ? verdict.keepDeployments : new Set([...verdict.keepDeployments, ...after]);
  const r = await runHandler(() => host.handlers.pruneDesired(keep, ctx));
  // As for a desired handler: a fresh session began while the prune ran. What it kept is the old
  // numbering's, and recorded in the new session it would skip the new snapshot's members numbered
  // after the old begin's seq as pruned. The new snapshot says what holds, and prunes by itself.
  if (!host.current()) return { settle: 'failed', reason: 'its session was replaced while the prune ran', cause: 'internal' };
  if (r.ok) {
    host.appliedRevision.keepOnly(keep, verdict.beginSeq);
    host.logger.info('pruned desired deployments against a complete hub snapshot', { reply_to: env.reply_to, kept: keep.size });
    host.pruned(keep);
  }
  // A transient failure keeps the stream open so the retry judges it again.
  if (r.ok || !r.retryable) host.streams.close(env.reply_to);
  return fromHandler(host, env, r, 'prune after hub snapshot');
}
