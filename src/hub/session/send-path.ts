import { buildFrame, bytesOver, CloseCode, HubSendQueue, newId, type MessageType, type OutboundSequencer, type Payload } from '../../protocol';
import type { HubConfig } from '../config';
import { describeError } from '../db/errors';
import { sendableFrameBytes } from '../frame-budget';
import type { LogFields, Logger } from '../log';
import { CoalescedRun } from './coalesced-run';
import { estimateBytes, type Effect, type Outgoing } from './outgoing';
import type { OwedAnswer, SessionMeta, SessionStore } from './store';

/**
 * The most answers the hub holds owed at once. They are small (an error of a few hundred bytes)
 * and normally leave at once; they pile up only while the operator keeps its replay window full,
 * and an operator that sends frames needing answers meanwhile must not grow storage without bound:
 * past it the next frame is refused (4429, replayed after the resume). Frames known at admission
 * to need an answer (ingest-batch.ts `answeredOnCommit`) count from then on (`admit`), beyond what
 * the replay window has room for, so a burst of them cannot pass it before their batch commits;
 * only frames the database refuses, known to need an answer once their batch commits, can still
 * take the count past it, by the frames then in flight.
 */
const OWED_ANSWERS_CAP = 1_000;

/**
 * The most an answer takes in the replay window, for counting room (`answerRoom`): an error frame
 * whose message and type name are cut to their bounds (ingest-batch.ts), with its envelope.
 */
const ANSWER_BYTES_MAX = 4096;

export function owedAnswersMax(cfg: HubConfig): number {
  return Math.min(OWED_ANSWERS_CAP, cfg.SEND_QUEUE_FRAMES);
}

export interface SendHost {
  cfg: HubConfig;
  store: SessionStore;
  meta(): SessionMeta | null;
  outbound(): OutboundSequencer;
  /** The cursor of the operator's stream, carried as `ack` on every frame. */
  cursor(): number;
  socket(): WebSocket | null;
  send(ws: WebSocket, frame: string): void;
  /** Close the session's connection; `fields` join the close's one log line (sockets.ts close). */
  closeActive(code: number, reason: string, fields?: LogFields): void;
  /**
   * A pass failed, with memory possibly moved past storage (numbered frames, a watermark): rebuild
   * the session from storage, drop what is queued and close the connection 1011.
   */
  failed(): void;
  log(): Logger;
  /** Frames were numbered and written (the replay buffer moved; the queue has room again). */
  written(queued: number): void;
  /**
   * A hub resync ended incomplete: its snapshot may not be pruned against, so what it could not
   * say (withdrawals made before it) must come as changes from the watermark it left in place.
   */
  resyncIncomplete(): void;
  /** Operations whose start was too large to send, an error sent in its place (committed): conclude them. */
  unsendable(operations: { operation_id: string; message: string }[]): void;
  /** Operations whose operation.start this pass numbered and stored (its id is in the replay buffer now). */
  startsWritten(operationIds: string[]): void;
}

/**
 * The hub's strict send path (spec "Backpressure", hub → operator): a bounded queue that never
 * drops desired state (full → close 4429, resume sorts it out), frames numbered only when
 * written, never more unacknowledged than the replay window, and everything numbered made durable
 * in the replay buffer before it is sent.
 *
 * Answers to operator frames (`owe`) do not wait in the queue: the queue is memory, dropped at a
 * disconnect and lost with the object, and the frame an answer replies to is acknowledged, so the
 * operator never sends it again. They wait in storage instead (store.ts `OwedAnswers`), ahead of
 * everything queued, until a pass numbers them into the replay buffer.
 */
export class SendPath {
  readonly queue: HubSendQueue<Outgoing>;
  /** How many of the queued items were queued behind an incomplete resync's end (`queuedBehindIncomplete`). */
  private behindIncomplete = 0;
  /** Since when frames have waited for the operator to release its replay window. */
  windowFullSince: number | null = null;
  /**
   * Frames admitted that are answered once their batch commits (an unknown type, a poison frame),
   * not committed yet: counted against the cap on answers owed (`admit`). Memory: their batch is
   * in flight on this connection, and a new connection starts from none (`clear`).
   */
  private answersComing = 0;
  /** The connection and the operator's ack when the window was found full: the wait goes on while both stand. */
  private windowFullAt: { ws: WebSocket; ack: number } | null = null;
  private readonly drainer: CoalescedRun;
  /** Inside `batch`: enqueues wait for its end to be drained together. */
  private holding = 0;
  private held = false;
  /** The largest frame this path sends (frame-budget.ts). */
  private readonly maxFrameBytes: number;

  constructor(private readonly host: SendHost) {
    this.queue = new HubSendQueue(host.cfg.SEND_QUEUE_FRAMES, host.cfg.SEND_QUEUE_BYTES);
    this.maxFrameBytes = sendableFrameBytes(host.cfg);
    this.drainer = new CoalescedRun(
      () => this.drainOnce(),
      (err) => {
        // Frames may be numbered and not stored (their writes are one transaction, rolled back):
        // memory is rebuilt from storage, and only a resume can make the rest right.
        host.log().error('send path failed; closing so the operator resumes', { error: describeError(err) });
        host.failed();
      },
    );
  }

  /** Frames waiting to be numbered: queued, and answers owed. */
  get pending(): number {
    return this.queue.length + this.host.store.owed.count;
  }

  /**
   * Since when something has waited for the operator to release its window: as this object saw
   * it, or, after an eviction, as stored, while answers owed still wait and the ack stands.
   */
  windowWaitSince(): number | null {
    if (this.windowFullSince !== null) return this.windowFullSince;
    const wait = this.host.meta()?.windowWait;
    if (!wait || wait.ack !== this.host.outbound().peerAck || this.host.store.owed.count === 0) return null;
    return wait.since;
  }

  /**
   * Whether an operator frame may be accepted for applying (it may be owed an answer once its
   * batch commits). False when the hub already owes as many answers as it may hold (the operator
   * keeps its window full): the connection is closed (4429) and the frame must not be applied, so
   * that it is not acknowledged and comes back after the resume.
   */
  admit(answerable: boolean): boolean {
    // Only answers the window will not take count: a burst answered as it commits, into a window
    // with room for it, is owed for no longer than that (1,900 poison frames at once, say).
    // (The room only when some are coming: this runs for every frame.)
    const beyond = this.answersComing > 0 ? Math.max(0, this.answersComing - this.answerRoom()) : 0;
    const owed = this.host.store.owed.count + beyond;
    if (owed >= owedAnswersMax(this.host.cfg)) {
      this.host.closeActive(CloseCode.SEND_QUEUE_FULL, 'hub owes the operator too many answers', { owed, unacked: this.host.outbound().unacked });
      return false;
    }
    if (answerable) this.answersComing++;
    return true;
  }

  /**
   * How many answers the replay window could still take behind what is queued, in frames and in
   * bytes (the window is full on either), each answer counted at the largest an answer is.
   */
  private answerRoom(): number {
    const cfg = this.host.cfg;
    const outbound = this.host.outbound();
    const frames = cfg.REPLAY_BUFFER_FRAMES - outbound.unacked - this.queue.length;
    const bytes = Math.floor((cfg.REPLAY_BUFFER_BYTES - outbound.store.bytes - this.queue.bytes) / ANSWER_BYTES_MAX);
    return Math.max(0, Math.min(frames, bytes));
  }

  /** `n` frames admitted as answerable were committed (their answers are owed from now on). */
  answered(n: number): void {
    this.answersComing = Math.max(0, this.answersComing - n);
  }

  /**
   * Owe the operator these answers: stored now, in the commit of whatever runs in this turn (the
   * cursor that passes their frames is saved in the same turn, or later), and sent ahead of
   * anything queued. Kept across a disconnect and an eviction until numbered; with no connection
   * they wait for the resume. Every one is kept, past the cap too: these answer frames the cursor
   * has passed, which the operator will never send again, so an answer dropped here would be lost
   * for good. The cap is enforced where it can be, by `admit` refusing the next frame; what passes
   * it is what was already admitted when the cap was reached, at most the frames waiting to be
   * applied.
   */
  owe(answers: readonly Outgoing[]): void {
    if (answers.length === 0) return;
    const owed = this.host.store.owed;
    const kept: Omit<OwedAnswer, 'n'>[] = [];
    for (const o of answers) {
      if (o.kind !== 'frame' || o.type !== 'error') continue;
      kept.push({ id: o.id ?? newId(), seq: o.answers ?? 0, replyTo: o.replyTo, payload: o.payload() as Payload<'error'> });
    }
    owed.add(kept);
    if (owed.count > owedAnswersMax(this.host.cfg)) {
      this.host.log().warn('answers owed to the operator past their cap; the next frame is refused until they are sent', { owed: owed.count });
    }
    if (this.holding > 0) this.held = true;
    else void this.drain();
  }

  /** Queue a frame; a full queue closes the connection (4429). False when it was not queued. */
  enqueue(o: Outgoing): boolean {
    if (!this.host.socket()) return false;
    // A frame over the largest sendable leaves as a small error frame instead (drainOnce): it
    // must not take more of the queue than the largest frame, or it alone could overflow it.
    if (!this.queue.push(o, Math.min(estimateBytes(o), this.maxFrameBytes))) {
      this.host.closeActive(CloseCode.SEND_QUEUE_FULL, 'hub send queue full', { queued: this.queue.length, unacked: this.host.outbound().unacked });
      return false;
    }
    if (this.holding > 0) this.held = true;
    else void this.drain();
    return true;
  }

  /**
   * Queue several frames as one: numbered, written and sent by one pass, so in one commit. Left
   * to `enqueue` alone, the first frame is written at once and the rest by a pass a microtask
   * later, which local workerd commits apart (one more disk sync).
   */
  batch<T>(queue: () => T): T {
    this.holding++;
    try {
      return queue();
    } finally {
      if (--this.holding === 0 && this.held) {
        this.held = false;
        void this.drain();
      }
    }
  }

  /** Number and write queued frames while the operator's window allows. Serialized: frames leave in seq order. */
  drain(): Promise<void> {
    return this.drainer.request();
  }

  /** Drop what was queued but not numbered (answers owed stay: they are not queued). */
  clear(): void {
    this.queue.clear();
    this.answersComing = 0;
    this.behindIncomplete = 0;
    this.windowFullSince = null;
  }

  /**
   * Send again, in order, every frame the operator has not acknowledged (clock.ts, `resend`), and
   * start the wait again; with nothing left unacknowledged, just end the wait.
   */
  resendUnacked(now: number): void {
    const meta = this.host.meta();
    const ws = this.host.socket();
    if (!meta || !ws) return;
    const outbound = this.host.outbound();
    const waited = now - (meta.ackWaitSince ?? now);
    // Straight from storage, one frame at a time (store.ts, sendAfter). The whole window once;
    // while the ack still stands after that, only its first frame: what was lost on the way (a
    // tail, or the copy itself) comes back one ack at a time, and an operator that reads nothing
    // (or whose handler holds its stream for minutes, which a close would cut and re-run) is not
    // sent the whole window again at every wait, each copy held by the runtime for a socket that
    // does not drain.
    const limit = meta.ackResent === true ? 1 : Number.POSITIVE_INFINITY;
    const sent = this.host.store.replay.sendAfter(outbound.peerAck, (frame) => this.host.send(ws, frame), limit);
    if (sent.count > 0) {
      this.host.log().warn('operator has not acknowledged frames while its ack stood still; sending them again', {
        unacked: sent.count,
        first_seq: sent.firstSeq,
        waited_ms: waited,
        operator_cursor: outbound.peerAck,
      });
    }
    meta.ackWaitSince = sent.count > 0 ? now : null;
    if (sent.count > 0) meta.ackResent = true;
    else delete meta.ackResent;
    this.host.store.saveMeta(meta);
  }

  /** A written frame's (or marker's) effect on the session's progress, and what it asks of the pump. */
  private apply(meta: SessionMeta, e: Effect): void {
    const incomplete = e.t === 'resync_done' && meta.hubResync?.incomplete === true;
    applyEffect(meta, e);
    if (incomplete) {
      this.behindIncomplete = this.queue.length;
      this.host.resyncIncomplete();
    }
  }

  /**
   * Whether `o`, just taken from the queue, was queued behind an incomplete resync's end: the
   * changes after the resync's revision that were queued before the pump went back to the
   * watermark the resync left. They are sent, but must not move the watermark: that would
   * record the withdrawals between the two as delivered while only the pump's re-fetch (memory)
   * would still send them, and a resume before it ran would never send them.
   */
  private queuedBehindIncomplete(): boolean {
    if (this.behindIncomplete === 0) return false;
    this.behindIncomplete--;
    return true;
  }

  private async drainOnce(): Promise<void> {
    const { cfg, store } = this.host;
    const meta = this.host.meta();
    const ws = this.host.socket();
    if (!meta || !ws) return;
    const outbound = this.host.outbound();
    const frames: string[] = [];
    const desiredSent: [string, string, number][] = [];
    const unsendable: { operation_id: string; message: string }[] = [];
    const startsWritten: string[] = [];
    let effects = 0;
    // A drain that stops at the full window again, with the operator's ack where it was, continues
    // the same wait: every desired change drains, and restarting the wait at each one would let an
    // operator that never acknowledges hold its session (and the changes) for as long as changes come.
    const at = this.windowFullAt;
    const stored = meta.windowWait;
    const waiting =
      at !== null && at.ws === ws && at.ack === outbound.peerAck
        ? this.windowFullSince
        : at === null && stored && stored.ack === outbound.peerAck
          ? stored.since // this object was evicted while the wait went on (the connection is the same: a hello clears it)
          : null;
    this.windowFullSince = null;
    let stoppedSince: number | null = null;
    // The window is the replay buffer: a frame goes out only if the buffer can keep it with every
    // frame not yet acknowledged. Stamping one that does not fit would push the oldest unacknowledged
    // frame out of the buffer, and the next resume (a dropped link) would have to be a full resync.
    // Sized before it is written (estimateBytes: exact for the payload, the envelope at its
    // largest), never more than a frame may be; an empty window takes any frame.
    const windowFull = (o: Outgoing): boolean =>
      outbound.unacked >= cfg.REPLAY_BUFFER_FRAMES ||
      (outbound.unacked > 0 && outbound.store.bytes + Math.min(this.maxFrameBytes, estimateBytes(o)) > cfg.REPLAY_BUFFER_BYTES);
    const stopAtWindow = (): void => {
      stoppedSince = waiting ?? Date.now();
      this.windowFullSince = stoppedSince;
      this.windowFullAt = { ws, ack: outbound.peerAck };
    };
    try {
      // Answers owed first: the frames they reply to are older than anything queued now.
      const owed = store.owed.list();
      let owedWritten = 0;
      for (const a of owed) {
        const answer: Outgoing = { kind: 'frame', type: 'error', payload: () => a.payload, replyTo: a.replyTo, id: a.id };
        if (windowFull(answer)) {
          stopAtWindow();
          break;
        }
        this.write(answer, meta, frames, desiredSent, unsendable);
        owedWritten++;
      }
      for (let o = this.queue.peek(); o !== undefined; o = this.queue.peek()) {
        if (o.kind === 'frame' && windowFull(o)) {
          // The operator has not released the replay window; frames wait in the queue.
          stopAtWindow();
          break;
        }
        this.queue.shift();
        const stale = this.queuedBehindIncomplete();
        if (o.kind === 'marker') {
          if (stale && o.effect.t === 'watermark') continue;
          this.apply(meta, o.effect);
          effects++;
          continue;
        }
        this.write(stale ? withoutWatermark(o) : o, meta, frames, desiredSent, unsendable);
        if (o.type === 'operation.start') startsWritten.push((o.payload() as Payload<'operation.start'>).operation_id);
      }
      const wait = stoppedSince !== null ? { since: stoppedSince, ack: outbound.peerAck } : null;
      const waitChanged = (meta.windowWait?.since ?? null) !== (wait?.since ?? null) || (meta.windowWait?.ack ?? null) !== (wait?.ack ?? null);
      if (waitChanged) meta.windowWait = wait;
      if (frames.length === 0) {
        if (effects > 0 || waitChanged) store.saveMeta(meta);
        return;
      }
      // Durable before it is sent: the replay buffer and the numbers that describe it. An answer
      // owed leaves storage in this same commit, now that the replay buffer holds it. All of it or
      // none: replay rows stored without the record that numbers them would be numbered again after
      // an eviction, and the operator would drop the new frames under those seqs as duplicates.
      meta.out = outbound.snapshot();
      meta.counters.framesOut += frames.length;
      meta.ackWaitSince ??= Date.now();
      store.atomically(() => {
        store.replay.flush();
        store.owed.taken(owedWritten);
        store.recordSentDesired(desiredSent);
        store.saveMeta(meta);
      });
    } catch (err) {
      // Memory moved with the pass (numbering, watermark, resync progress) and storage did not:
      // put memory back now, before anything later in this turn stores the record it would carry.
      this.host.log().error('send path failed; closing so the operator resumes', { error: describeError(err) });
      this.host.failed();
      return;
    }
    if (unsendable.length > 0) this.host.unsendable(unsendable);
    if (startsWritten.length > 0) this.host.startsWritten(startsWritten);
    if (this.host.socket() !== ws) return;
    this.host.written(this.queue.length);
    for (const frame of frames) this.host.send(ws, frame);
  }

  /** Number one frame into the replay buffer (flushed by the caller) and collect its text. */
  private write(
    o: Extract<Outgoing, { kind: 'frame' }>,
    meta: SessionMeta,
    frames: string[],
    desiredSent: [string, string, number][],
    unsendable: { operation_id: string; message: string }[],
  ): void {
    const outbound = this.host.outbound();
    const id = o.id ?? newId();
    const type = o.type;
    const replyTo = o.replyTo;
    const payload = type === 'stream.end' && o.effect?.t === 'resync_end' && meta.hubResync?.incomplete ? { ...(o.payload() as Payload<'stream.end'>), complete: false } : o.payload();
    let tooLarge = 0;
    let stamped = 0;
    const { frame } = outbound.stamp((seq) => {
      stamped = seq;
      const ack = this.host.cursor();
      const text = buildFrame({ type, payload, seq, ack, reply_to: replyTo, id });
      tooLarge = bytesOver(text, this.maxFrameBytes);
      if (tooLarge === 0) return text;
      return buildFrame({ type: 'error', payload: notSent(type, payload, tooLarge, this.maxFrameBytes), seq, ack, reply_to: replyTo, id });
    });
    frames.push(frame);
    if (tooLarge > 0) {
      // Already accepted (an older hub, another writer of Postgres): it can never be stored or
      // sent, and failing on it would stop everything behind it on every attempt. The operator
      // is told in its place; a resync carrying it ends incomplete (nothing is pruned).
      if (meta.hubResync && replyTo === meta.hubResync.beginId) meta.hubResync.incomplete = true;
      if (type === 'operation.start') {
        unsendable.push({
          operation_id: (payload as Payload<'operation.start'>).operation_id,
          message: `its operation.start would be ${tooLarge} bytes, over the ${this.maxFrameBytes} a frame may be (MAX_FRAME_BYTES): it can never be sent`,
        });
      }
      this.host.log().error('POISON: frame too large to send; an error frame was sent in its place', {
        seq: stamped,
        frame_id: id,
        type,
        ...subjectOf(type, payload),
        bytes: tooLarge,
        max_frame_bytes: this.maxFrameBytes,
      });
    } else if (type === 'deployment.desired') {
      const d = payload as Payload<'deployment.desired'>;
      desiredSent.push([id, d.deployment_id, d.revision]);
    }
    if (o.revision !== undefined) meta.desiredWatermark = Math.max(meta.desiredWatermark, o.revision);
    if (o.effect) this.apply(meta, o.effect);
  }
}

function subjectOf(type: MessageType, payload: Payload<MessageType>): Record<string, unknown> {
  if (type === 'deployment.desired') {
    const d = payload as Payload<'deployment.desired'>;
    return { deployment_id: d.deployment_id, revision: d.revision };
  }
  if (type === 'operation.start') return { operation_id: (payload as Payload<'operation.start'>).operation_id };
  return {};
}

/** The error frame sent in place of a frame too large to send. */
function notSent(type: MessageType, payload: Payload<MessageType>, bytes: number, max: number): Payload<'error'> {
  const what = Object.entries(subjectOf(type, payload))
    .map(([k, v]) => `${k} ${String(v)}`)
    .join(', ');
  return {
    code: 'invalid',
    message: `${type}${what ? ` (${what})` : ''} is ${bytes} bytes, over the ${max} a frame may be: not sent; it stays undelivered until it is replaced or withdrawn`,
    retryable: false,
  };
}

/** `o` as it is sent, without what would move the desired watermark (its revision, a watermark effect). */
function withoutWatermark(o: Extract<Outgoing, { kind: 'frame' }>): Extract<Outgoing, { kind: 'frame' }> {
  const { revision: _revision, effect, ...rest } = o;
  return effect && effect.t !== 'watermark' ? { ...rest, effect } : rest;
}

/** What a written frame (or a marker behind it) changes in the session's durable progress. */
export function applyEffect(meta: SessionMeta, e: Effect): void {
  const r = meta.hubResync;
  switch (e.t) {
    case 'watermark':
      meta.desiredWatermark = Math.max(meta.desiredWatermark, e.revision);
      return;
    case 'resync_begin':
      if (r) r.stage = 'pages';
      return;
    case 'resync_item':
      if (r) {
        r.after = e.deploymentId;
        r.count++;
      }
      if (e.revision > (meta.desiredSeen ?? 0)) meta.desiredSeen = e.revision;
      return;
    case 'resync_end':
      if (r) r.stage = 'ops';
      return;
    case 'resync_op':
      if (r) r.opsAfter = Math.max(r.opsAfter ?? 0, e.revision);
      return;
    case 'resync_done':
      // An incomplete snapshot is not pruned against: a deployment withdrawn before it (its
      // tombstone at or below the resync's revision) would be neither pruned nor ever sent. The
      // watermark stays, and the changes from it carry every withdrawal as `deleted: true`.
      if (r && !r.incomplete) meta.desiredWatermark = Math.max(meta.desiredWatermark, r.revision);
      if (r) meta.opsRedeliveredThrough = r.revision;
      meta.hubResync = null;
      return;
  }
}
