/**
 * Getting operations' conclusions to the hub (the operation book, operations.ts, decides them).
 *
 * A conclusion goes once per session: queued, then numbered and held in the replay buffer until
 * the hub acknowledges the frame, which a resume replays and a fresh session discards (and so it
 * goes again). It waits here, kept in its record and on disk, while the send queue has no room
 * for control frames. Which frame carries it, and whether one already on its way answers a given
 * start, is decided here too: the hub reads a result by its operation_id, an error by the start it
 * replies to.
 */
import type { ReplayEntry } from '../protocol';
import type { OperationRecord } from './cursor-store';
import { outItem, type OutItem } from './outgoing';

export interface ConclusionHost {
  send(item: OutItem): void;
  /** Whether the send queue has room for a control frame now. */
  hasRoom(): boolean;
}

/** A conclusion written in this session: the seq that carried it and the start it replied to. */
export interface WrittenConclusion {
  seq: number;
  replyTo: string | null;
}

export class ConclusionDelivery {
  /** Queued but not yet written: not queued twice. */
  private readonly queued = new Set<string>();
  /** Written in this session and not yet acknowledged. */
  private readonly written = new Map<string, WrittenConclusion>();
  /** Found the send queue's control bound reached: sent once there is room. */
  private readonly deferred = new Set<string>();

  constructor(
    private readonly records: ReadonlyMap<string, OperationRecord>,
    private readonly host: ConclusionHost,
  ) {}

  /** After a restart: a conclusion the outbound log holds is carried by its replay, not queued again. */
  track(operationId: string, logged: WrittenConclusion): void {
    this.written.set(operationId, logged);
  }

  /** The hub acknowledged everything through `peerAck`: the operations whose conclusions that delivered. */
  acknowledged(peerAck: number): string[] {
    const delivered: string[] = [];
    for (const [id, { seq }] of this.written) {
      if (seq > peerAck) continue;
      this.written.delete(id);
      delivered.push(id);
    }
    return delivered;
  }

  /** A fresh session dropped the replay buffer: every conclusion not acknowledged goes again. */
  freshSession(): void {
    this.written.clear();
    this.deferred.clear();
    for (const r of this.records.values()) {
      if (r.state === 'concluded' && !r.delivered) this.send(r, r.startId);
    }
  }

  get hasDeferred(): boolean {
    return this.deferred.size > 0;
  }

  /** Queue the conclusions that waited for room, while there is room. */
  resumeDeferred(): void {
    for (const id of [...this.deferred]) {
      if (!this.host.hasRoom()) return;
      this.deferred.delete(id);
      const r = this.records.get(id);
      if (r && r.state === 'concluded' && !r.delivered) this.send(r, r.startId);
    }
  }

  /**
   * Whether this conclusion already goes to the hub in this session: queued, or numbered and not
   * yet acknowledged (a resume replays it; a fresh session clears this and sends it again). A
   * result counts whichever start it replied to, since the hub reads it by its operation_id; an
   * error only when it answers this very frame: the hub finds the operation of an error by its
   * reply_to, and remembers only some of an operation's start ids.
   */
  onItsWay(record: OperationRecord, replyTo: string): boolean {
    if (this.queued.has(record.operationId)) return true;
    const w = this.written.get(record.operationId);
    return w !== undefined && (record.conclusion?.frame === 'result' || w.replyTo === replyTo);
  }

  /** Send the record's conclusion as an answer to `replyTo` (its start, or a redelivery of it). */
  send(record: OperationRecord, replyTo: string): void {
    const c = record.conclusion;
    if (!c || this.queued.has(record.operationId)) return;
    if (!this.host.hasRoom()) {
      // Kept in the record (and on disk): nothing is lost while it waits.
      this.deferred.add(record.operationId);
      return;
    }
    this.queued.add(record.operationId);
    const onWritten = (seq: number) => {
      this.queued.delete(record.operationId);
      this.written.set(record.operationId, { seq, replyTo });
    };
    const item =
      c.frame === 'result'
        ? outItem('operation.result', { operation_id: record.operationId, outcome: c.outcome, message: c.message }, replyTo, { onWritten })
        : outItem('error', { code: c.code, message: c.message, retryable: false }, replyTo, { onWritten });
    this.host.send(item);
  }
}

/**
 * The conclusions among frames of our own log, by operation: a result names its operation; an
 * error is one only when it replies to a start the records know (it could answer another frame).
 */
export function conclusionsIn(records: ReadonlyMap<string, OperationRecord>, entries: readonly ReplayEntry[]): Map<string, WrittenConclusion> {
  const byStart = new Map<string, string>();
  for (const r of records.values()) byStart.set(r.startId, r.operationId);
  const found = new Map<string, WrittenConclusion>();
  for (const e of entries) {
    let f: { type?: unknown; reply_to?: unknown; payload?: { operation_id?: unknown } };
    try {
      f = JSON.parse(e.frame) as typeof f;
    } catch {
      continue;
    }
    const replyTo = typeof f.reply_to === 'string' ? f.reply_to : null;
    const id =
      f.type === 'operation.result' && typeof f.payload?.operation_id === 'string'
        ? f.payload.operation_id
        : f.type === 'error' && replyTo !== null
          ? byStart.get(replyTo)
          : undefined;
    const r = id === undefined ? undefined : records.get(id);
    if (r && r.state === 'concluded' && r.conclusion?.frame === (f.type === 'error' ? 'error' : 'result')) found.set(r.operationId, { seq: e.seq, replyTo });
  }
  return found;
}
