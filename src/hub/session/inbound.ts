/**
 * What a frame of an open session means, and what a committed batch settles, pure. The session
 * object feeds decoded frames in and performs what comes out (a pong, a close, an ingest item,
 * an answer); the sequencer's arrival expectation is passed in as a function, the one piece of
 * state a frame moves.
 */
import { answerableId, type Arrival, type Incoming, type Payload, type Settlement } from '../../protocol';
import type { IngestResult } from '../db/ingest';
import type { Logger } from '../log';
import type { LogBudget } from '../log-budget';
import { storableText } from '../storable-text';
import type { BuiltBatch, InboundItem } from './ingest-batch';
import { countOnceIn } from './ingest-streams';
import type { Outgoing } from './outgoing';
import type { SessionCounters } from './store';

export type FrameAction =
  /** Close 4400 after an error naming the reason. */
  | { do: 'protocol-error'; replyTo: string | null; reason: string }
  | { do: 'pong' }
  /** A connection-level error from the operator: logged, never fatal. */
  | { do: 'peer-error'; payload: Payload<'error'> | null }
  | { do: 'nothing' }
  | { do: 'duplicate' }
  /** Accepted: apply it (in a batch; counted, and answered if it is refused, when committed). */
  | { do: 'apply'; item: InboundItem };

/** After the envelope's ack was taken: what to do with this frame. */
export function triageFrame(f: Exclude<Incoming, { kind: 'fatal' }>, arrive: (seq: number) => Arrival, expected: () => number, now: number): FrameAction {
  const env = f.envelope;
  if (env.seq === null) {
    switch (env.type) {
      case 'ping':
        return { do: 'pong' };
      case 'hello':
        return { do: 'protocol-error', replyTo: answerableId(env.id), reason: 'hello is never sent again on the same connection' };
      case 'error':
        return { do: 'peer-error', payload: f.kind === 'message' && f.message.type === 'error' ? f.message.payload : null };
      default:
        // pong and ack: their whole content is the envelope's ack, already taken.
        return { do: 'nothing' };
    }
  }
  const seq = env.seq;
  const arrival = arrive(seq);
  if (arrival === 'duplicate') return { do: 'duplicate' };
  if (arrival === 'gap') return { do: 'protocol-error', replyTo: answerableId(env.id), reason: `gap: expected seq ${expected()}, got ${seq}` };
  // A reply_to that is not an id (a poison frame's) names nothing: no stream, no operation.
  const replyTo = env.reply_to === null ? null : answerableId(env.reply_to);
  // The hot path (an observed frame) builds its item in one object, with no spread of a base.
  if (f.kind === 'message') return { do: 'apply', item: { seq, id: env.id, replyTo, type: env.type, arrivedAt: now, kind: 'message', message: f.message } };
  const base = { seq, id: env.id, replyTo, type: env.type, arrivedAt: now };
  // An unknown type is answered when its batch commits (settleCommitted), as poison is: answered
  // on arrival, a frame whose batch never committed (the link dropped first) was answered again
  // when the resume replayed it.
  if (f.kind === 'unknown') return { do: 'apply', item: { ...base, kind: 'unknown' } };
  return { do: 'apply', item: { ...base, kind: 'poison', reason: f.reason } };
}

export interface Settled {
  /** Each frame's outcome for the sequencer (a rejection is accepted and dropped). */
  outcomes: [seq: number, outcome: Settlement][];
  /** Counters to add. */
  counters: Partial<SessionCounters>;
  /** Errors answering frames that can never apply (unknown types, rejections), in the order of the frames they answer. */
  answers: Outgoing[];
}

/**
 * A batch committed in Postgres: how its frames settle, what to count, and what to answer.
 * `counted` holds the seqs past the cursor already counted (`SessionMeta.countedAhead`): a frame
 * committed past a hole is sent again after a resume (the operator replays from the cursor) and
 * committed again, harmlessly, but is counted once.
 */
export function settleCommitted(items: readonly InboundItem[], built: BuiltBatch, result: IngestResult, counted: [number, number][]): Settled {
  let framesIn = 0;
  let unknownTypes = 0;
  let poison = 0;
  // Frames the batch itself refused (a type only the hub sends, a stream.end for no open stream)
  // are recorded and answered as poison is, so they count as rejections too.
  const refused = built.batch.rejections.length > 0 ? new Set(built.batch.rejections.map((r) => r.seq)) : null;
  // Committed before (past a hole) and replayed after a resume: it was answered at that commit,
  // and the operator must not get a second error for one frame.
  let again: Set<number> | null = null;
  const answers: [seq: number, answer: Outgoing][] = [];
  for (const i of items) {
    if (!countOnceIn(counted, i.seq)) {
      (again ??= new Set()).add(i.seq);
      continue;
    }
    framesIn++;
    if (i.kind === 'unknown') {
      unknownTypes++;
      answers.push([i.seq, unknownTypeAnswer(i)]);
    } else if (i.kind === 'poison' || refused?.has(i.seq)) poison++;
  }
  const rejected = [...built.batch.rejections.filter((x) => x.answer), ...result.unknownOperations].filter((r) => !again?.has(r.seq));
  for (const r of rejected) answers.push([r.seq, rejectionAnswer(r)]);
  return {
    outcomes: items.map((i) => [i.seq, i.kind === 'message' ? 'applied' : 'dropped']),
    counters: {
      framesIn,
      unknownTypes,
      pruned: result.pruned,
      resyncsCompleted: built.streams.filter((s) => s.complete).length,
      resyncsIncomplete: built.streams.filter((s) => !s.complete).length,
      // As the database counted them: a frame replayed after a resume was counted when first applied.
      desiredRefusals: result.desiredRefusalsCounted ?? built.batch.desiredRefusals.length,
      rejections: poison + (result.unknownOperationsRecorded ?? result.unknownOperations.length),
      answeredRejections: rejected.length,
    },
    answers: answers.sort((a, b) => a[0] - b[0]).map(([, a]) => a),
  };
}

/** The sequenced error that answers a frame of a type the hub does not know, naming the type (spec "Envelope"). */
function unknownTypeAnswer(item: InboundItem): Outgoing {
  return {
    kind: 'frame',
    type: 'error',
    payload: () => ({
      code: 'invalid',
      // Cut between code points: a slice through an emoji would answer with a lone surrogate.
      message: `unknown message type ${storableText(item.type, 200)}`,
      retryable: false,
      unknown_type: storableText(item.type, 256),
    }),
    replyTo: answerableId(item.id),
    answers: item.seq,
  };
}

/** The sequenced error that answers a rejected frame (reply_to: its id, when it is a ULID). */
export function rejectionAnswer(r: { seq: number; frame_id: string | null; type: string; reason: string }): Outgoing {
  const replyTo = answerableId(r.frame_id);
  return {
    kind: 'frame',
    type: 'error',
    payload: () => ({ code: 'invalid', message: `frame rejected (${storableText(r.type, 64)}): ${storableText(r.reason, 400)}`, retryable: false }),
    replyTo,
    answers: r.seq,
  };
}

export function addCounters(into: SessionCounters, add: Partial<SessionCounters>): void {
  for (const [k, v] of Object.entries(add) as [keyof SessionCounters, number][]) into[k] += v;
}

// What of an operator's text a log line quotes: enough to recognise, never the frame's content.
const LOG_TYPE_CHARS = 128;
const LOG_TEXT_CHARS = 512;
const LOG_ID_CHARS = 64;

/** Operator text as a log line quotes it (cut between code points, NUL and lone surrogates mended). */
export function logText(s: string | null | undefined, max = LOG_TEXT_CHARS): string | null {
  return typeof s === 'string' ? storableText(s, max) : null;
}

/** The line for a connection-level error frame from the operator: its code and (cut) message. */
export function logPeerError(log: Logger, budget: LogBudget, payload: Payload<'error'> | null, replyTo: string | null): void {
  budget.write(log, {
    kind: 'peer-error',
    level: 'warn',
    msg: 'connection error from operator',
    fields: payload
      ? { code: payload.code, message: logText(payload.message), retryable: payload.retryable, reply_to: logText(replyTo, LOG_ID_CHARS) }
      : { payload: null, reply_to: logText(replyTo, LOG_ID_CHARS) },
    reason: payload ? logText(payload.message, 200) : null,
  });
}

/**
 * What a committed batch says about the operator, for the log. The lines an operator can provoke
 * once per frame (its error frames, its refusals, poison) go through the session's log budget.
 */
export function logCommitted(log: Logger, budget: LogBudget, built: BuiltBatch, result: IngestResult): void {
  // Budgeted too: a begin past the open streams' cap ends the oldest (one line per frame), and an
  // empty begin + stream.end pair is one line per two frames.
  for (const s of built.streams) {
    budget.write(log, {
      kind: s.complete ? 'resync-complete' : 'resync-incomplete',
      level: 'info',
      msg: s.complete ? 'operator resync complete; pruned absent rows' : 'operator resync incomplete; nothing pruned',
      fields: { seq: s.seq, begin: logText(s.beginId, LOG_ID_CHARS), reason: s.reason, pruned: s.complete ? result.pruned : 0, ...(s.unknownKinds ? { not_pruned_unknown_kinds: s.unknownKinds } : {}) },
      seq: s.seq,
      reason: s.reason,
    });
  }
  for (const e of built.peerErrors) {
    budget.write(log, {
      kind: 'peer-error',
      level: 'warn',
      msg: 'error frame from operator',
      fields: { seq: e.seq, reply_to: logText(e.replyTo, LOG_ID_CHARS), code: e.payload.code, message: logText(e.payload.message) },
      seq: e.seq,
      reason: logText(e.payload.message, 200),
    });
  }
  for (const r of built.batch.desiredRefusals) {
    budget.write(log, {
      kind: 'desired-refusal',
      level: 'warn',
      msg: 'operator refused desired state; recorded on the deployment',
      fields: { seq: r.seq, deployment_id: r.deployment_id, revision: r.revision, code: r.code, message: logText(r.message) },
      seq: r.seq,
      reason: logText(r.message, 200),
    });
  }
  for (const r of built.refused) logPoison(log, budget, 'POISON FRAME: accepted, acknowledged, dropped and recorded', r.seq, r.type, r.id, r.reason);
  for (const r of result.unknownOperations) {
    logPoison(log, budget, 'POISON FRAME: names an operation this cluster does not have; acknowledged, dropped, recorded', r.seq, r.type, r.frame_id, r.reason);
  }
}

/** A poison frame's line: loud, within the session's log budget, quoting at most a few hundred characters of it. */
function logPoison(log: Logger, budget: LogBudget, msg: string, seq: number, type: string, frameId: string | null, reason: string): void {
  budget.write(log, {
    kind: 'poison',
    level: 'error',
    msg,
    fields: { seq, type: logText(type, LOG_TYPE_CHARS), frame_id: logText(frameId, LOG_ID_CHARS), reason: logText(reason) },
    seq,
    reason: logText(reason, 200),
  });
}

/**
 * What an accepted frame says about the operator, for the log, once its batch has committed (it is
 * acknowledged and recorded then, and a replay of it is a duplicate): unknown types and poison,
 * loudly, within the session's log budget, and quoting at most a few hundred characters of what it
 * sent.
 */
export function logAccepted(log: Logger, budget: LogBudget, item: InboundItem): void {
  if (item.kind === 'unknown') {
    budget.write(log, {
      kind: 'unknown',
      level: 'warn',
      msg: 'unknown message type; dropped, acknowledged and answered',
      fields: { seq: item.seq, type: logText(item.type, LOG_TYPE_CHARS) },
      seq: item.seq,
      reason: logText(item.type, LOG_TYPE_CHARS),
    });
  } else if (item.kind === 'poison') {
    logPoison(log, budget, 'POISON FRAME: accepted, acknowledged, dropped and recorded', item.seq, item.type, item.id, item.reason);
  }
}
