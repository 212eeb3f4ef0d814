import { newId, type MessageType, type Payload } from '../../protocol';
import type { HubConfig } from '../config';
import type { ClaimSnapshot } from '../db/claim-snapshot';
import {
  fetchDesiredChanges,
  fetchDesiredSnapshotPage,
  fetchOpenOperations,
  markOperationsSent,
  operationRevision,
  type DesiredChange,
} from '../db/desired';
import { failureLine } from '../db/errors';
import { desiredPageBytes, sendableFrameBytes } from '../frame-budget';
import type { SessionFence } from '../db/ingest';
import type { Sql } from '../db/sql';
import type { Logger } from '../log';
import { estimateBytes, type Effect, type Outgoing } from './outgoing';
import type { HubResync, SessionMeta } from './store';
import { sessionRetryDelay } from './retry-delay';

export interface PumpHost {
  cfg: HubConfig;
  /** The shared gateway: desired reads are short statements. */
  sql: Sql;
  meta(): SessionMeta | null;
  connected(): boolean;
  /** Frames already waiting in the send queue. */
  queued(): number;
  /** Bytes already waiting in the send queue: a page is fetched to fit what is left. */
  queuedBytes(): number;
  /** Queue a frame; false when it could not be (the connection is closing). */
  enqueue(o: Outgoing): boolean;
  /** A read or an operation record found the session's claim gone: check it now (it is cut) rather than at the next poll. */
  claimLost(): void;
  /** Queue several frames as one (written in one commit). */
  batch<T>(queue: () => T): T;
  fence(): SessionFence | null;
  /** The operation id of the newest operation.start frame in the replay buffer, if any. */
  lastOperationStart(): string | null;
  log(): Logger;
}

/** In-memory fetch progress; the persisted watermark and resync progress move only when frames are written. */
interface FetchState {
  stage: 'begin' | 'pages' | 'ops' | 'done';
  snapshotAfter: string | null;
  /** Operations are redelivered in revision order, from after the last one written. */
  opsAfter: number;
  /**
   * The last operation the redelivery wrote, by id, when only that is known (`legacyLastStart`):
   * its revision is read into opsAfter before the redelivery goes on.
   */
  opsAfterStart: string | null;
  changesAfter: number;
  /** Operations at or below this revision were delivered by the resync: the changes skip them. */
  opsFloor: number;
  /** The highest revision a snapshot page carried (pages read after the claim can carry later ones). */
  snapshotMax: number;
}

/**
 * A record of a hub from before HubResync.opsAfter was stored, left part way through its
 * redelivery of open operations (a deploy over a session whose operator's window was full).
 */
function legacyRedelivery(meta: SessionMeta | null): boolean {
  const r = meta?.hubResync;
  return r?.stage === 'ops' && r.opsAfter === undefined;
}

function fetchStateFrom(meta: SessionMeta | null, legacyLastStart: string | null): FetchState {
  const r = meta?.hubResync ?? null;
  return {
    stage: r ? r.stage : 'done',
    snapshotAfter: r?.after ?? null,
    opsAfter: r?.opsAfter ?? 0,
    opsAfterStart: legacyRedelivery(meta) ? legacyLastStart : null,
    changesAfter: meta?.desiredWatermark ?? 0,
    opsFloor: meta?.opsRedeliveredThrough ?? 0,
    snapshotMax: meta?.desiredSeen ?? 0,
  };
}

/** The latest desired revision this session's record shows to exist: what a rebuilt pump starts from. */
function knownFrom(meta: SessionMeta | null): number {
  return Math.max(meta?.desiredWatermark ?? 0, meta?.desiredSeen ?? 0);
}

/** Past this many unqueued start ids (operations fetched and never queued) they are forgotten. */
const UNQUEUED_START_IDS_MAX = 10_000;

/**
 * What the session owes its operator of desired state, fetched from Postgres into the send queue:
 * the hub's resync of a fresh session (begin → every deployment → stream.end → open operations),
 * then every change above the watermark. Fetches only into free queue space (desired state waits
 * in Postgres, not in a queue that could overflow); one pump at a time.
 */
export class DesiredPump {
  private progress: FetchState;
  /** The latest desired revision known to exist in Postgres. */
  private knownRevision: number;
  /** The session `knownRevision` was learned for. */
  private knownFor: string | null;
  private pumping = false;
  private again = false;
  /** A failed fetch's own retry: nothing else may come (see `retryLater`). */
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private failures = 0;
  /**
   * Start frame ids recorded in Postgres (or possibly recorded: a statement whose answer was lost
   * may have committed) whose frame is not written yet, by operation id: the retry records and
   * sends the same id, also after the queue holding the frame was dropped (a close while it waited
   * for the replay window). A new id per try left the first, never sent, in the operation's first
   * start slot, which is kept for good (the SDK answers the start it first accepted), so an error
   * answering the start that did go could stop concluding the operation once newer deliveries
   * pushed it out. Forgotten once the send path has stored the frame (`written`); an eviction
   * forgets it too (the slot can then still hold an id never sent), and so does a map grown past
   * UNQUEUED_START_IDS_MAX (operations fetched and never written: concluded or withdrawn meanwhile).
   */
  private readonly unqueuedStartIds = new Map<string, string>();

  /**
   * With a legacy record (`legacyRedelivery`), the newest operation.start in the replay buffer as
   * the object found it. Its starts went in revision order, and those not acknowledged are still
   * there, so this is where the redelivery stopped. Read before the hello's resume acknowledges
   * what the operator has (which empties the buffer of them); with none there (all acknowledged
   * in an earlier life, or none written) the redelivery starts over, as that hub's did, and the
   * starts already delivered go again under new frame ids.
   */
  private readonly legacyLastStart: string | null;

  constructor(
    private readonly host: PumpHost,
    meta: SessionMeta | null,
  ) {
    this.legacyLastStart = legacyRedelivery(meta) ? host.lastOperationStart() : null;
    this.progress = fetchStateFrom(meta, this.legacyLastStart);
    this.knownRevision = knownFrom(meta);
    this.knownFor = meta?.sessionId ?? null;
  }

  /**
   * Drop the in-memory progress: the fetch restarts from what was written. Another session's
   * known revision is dropped too: after the database went back (a restore, ownership.ts) it is
   * above the counter, and kept it would move the fresh session's watermark past revisions not
   * yet written, which would then never be sent.
   */
  reset(meta: SessionMeta | null): void {
    this.progress = fetchStateFrom(meta, this.legacyLastStart);
    const session = meta?.sessionId ?? null;
    if (session !== this.knownFor) {
      this.knownFor = session;
      this.knownRevision = knownFrom(meta);
    }
  }

  /** These operations' starts are in the replay buffer: their ids are settled. */
  written(operationIds: readonly string[]): void {
    for (const id of operationIds) this.unqueuedStartIds.delete(id);
  }

  learn(revision: number): void {
    if (revision > this.knownRevision) this.knownRevision = revision;
  }

  /**
   * Desired state changed, up to `revision`. With the changes themselves, when they are
   * deployments that follow on from what is already queued with nothing between, queue them
   * without reading them back; anything else goes through the fetch. (An operation takes the
   * fetch path: its start frame's id must be recorded before it is sent.)
   */
  poke(revision: number, changes: readonly DesiredChange[] = []): void {
    // A later revision already known (a resync page read after the claim carried it, whose
    // catch-up read then failed; or a later poke came first) may have been sent already: these
    // changes, as they were written, could then be older than it. The fetch reads them as now.
    const newest = revision >= this.knownRevision;
    this.learn(revision);
    const f = this.progress;
    const follows =
      newest &&
      changes.length > 0 &&
      changes.every((c, i) => c.kind === 'deployment' && c.revision === f.changesAfter + 1 + i) &&
      changes[changes.length - 1]?.revision === revision;
    if (follows && f.stage === 'done' && !this.pumping && this.host.connected() && this.host.queued() + changes.length <= this.host.cfg.SEND_QUEUE_FRAMES - 2) {
      const frames = changes.flatMap((c) => (c.kind === 'deployment' ? [{ ...frame('deployment.desired', c.payload, null), revision: c.revision }] : []));
      // Bytes as a fetched page is bounded: a bulk write can carry more than the queue has free,
      // and queued regardless it would close the connection (4429). Too large: the fetch pages it.
      if (this.fitsQueue(frames)) {
        // Advanced first: queuing drains at once, and the drain may start a pump that must not
        // fetch these again. (If the queue refuses one, the connection closes and the fetch state
        // is rebuilt from what was written.)
        f.changesAfter = revision;
        this.host.batch(() => frames.every((o) => this.host.enqueue(o)));
        return;
      }
    }
    void this.run();
  }

  private fitsQueue(frames: readonly Outgoing[]): boolean {
    const { cfg } = this.host;
    const budget = desiredPageBytes(cfg, this.host.queuedBytes());
    const largest = sendableFrameBytes(cfg);
    // The worst case fits without measuring: a single change into a queue with room.
    if (frames.length * largest <= budget) return true;
    let bytes = 0;
    for (const o of frames) {
      bytes += Math.min(estimateBytes(o), largest);
      if (bytes > budget) return false;
    }
    return true;
  }

  /** Fetch what is owed and queue it. A failure is logged and retried (`retryLater`). */
  async run(): Promise<void> {
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.again = false;
        while (await this.step()) {
          // keep going while there is work and room
        }
      } while (this.again);
      this.failures = 0;
    } catch (err) {
      // Nothing of a failed step was queued (operation starts are recorded before they are).
      // A warning while Postgres is away, an error for a fault.
      const line = failureLine('desired-state fetch or operation record', err);
      const retryMs = this.retryLater();
      this.host.log()[line.level](`${line.message}; nothing of it was sent; retried in ${retryMs} ms or when the session is next poked`, line.fields);
    } finally {
      this.pumping = false;
    }
  }

  /**
   * Run again after a failure, with backoff, while something is owed. The fleet poll pokes a
   * session only when the cluster's desired revision passes what it has seen, which a hub resync
   * left open does not show (a cluster at revision 0 never moves): without this, a resync whose
   * page read failed would wait for the next admin write or reconnect, its stream.end never sent.
   */
  private retryLater(): number {
    const delay = sessionRetryDelay(this.host.cfg.POLL_INTERVAL_MS, this.failures);
    this.failures++;
    if (this.retryTimer === null && this.owes()) {
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        void this.run();
      }, delay);
    }
    return delay;
  }

  /** Something of desired state (a hub resync's rest, changes past the watermark) is still to be queued. */
  owes(): boolean {
    return this.progress.stage !== 'done' || this.knownRevision > this.progress.changesAfter;
  }

  /** One fetch; true when another may follow at once. */
  private async step(): Promise<boolean> {
    const { cfg, sql } = this.host;
    const meta = this.host.meta();
    if (!meta || !this.host.connected()) return false;
    // Two slots stay free for a stream.end and a marker.
    const queued = this.host.queued();
    const page = Math.min(cfg.DESIRED_PAGE_ROWS, cfg.SEND_QUEUE_FRAMES - queued - 2);
    // Bytes too: one page of large deployments can outgrow the queue (4429 on every resume).
    // An empty queue takes a page whatever the budget: it always holds its first row.
    const bytes = desiredPageBytes(cfg, this.host.queuedBytes());
    if (page < 1 || (bytes <= 0 && queued > 0)) return false;
    const maxBytes = Math.max(0, bytes);
    const f = this.progress;
    const resync = meta.hubResync;
    if (resync && f.stage !== 'done') {
      if (f.stage === 'begin') {
        f.stage = 'pages';
        return this.host.enqueue(frame('resync.begin', { scope: ['deployment'] }, null, { t: 'resync_begin' }, resync.beginId));
      }
      if (f.stage === 'pages') {
        const fence = this.host.fence();
        const rows = fence && (await fetchDesiredSnapshotPage(sql, fence, f.snapshotAfter, page, maxBytes));
        if (!rows) return this.claimLost();
        if (this.progress !== f) return false;
        return this.host.batch(() => this.queueSnapshotPage(f, resync, rows.rows.map((r) => r.payload), rows.more));
      }
      if (f.stage === 'ops') {
        if (f.opsAfterStart !== null) {
          // An older hub's redelivery, stopped after this operation (legacyLastStart).
          const revision = await operationRevision(sql, meta.clusterUid, f.opsAfterStart);
          if (this.progress !== f) return false;
          f.opsAfter = Math.max(f.opsAfter, revision ?? 0);
          f.opsAfterStart = null;
        }
        const { rows: ops, more } = await fetchOpenOperations(sql, meta.clusterUid, f.opsAfter, resync.revision, page, maxBytes);
        if (this.progress !== f) return false;
        const ids = await this.recordOperationStarts(ops.map((o) => o.payload));
        if (!ids) return this.claimLost();
        if (this.progress !== f) return false;
        return this.host.batch(() => {
          for (const o of ops) {
            if (!this.host.enqueue(frame('operation.start', o.payload, null, { t: 'resync_op', revision: o.revision }, ids.get(o.payload.operation_id)))) {
              return false;
            }
            f.opsAfter = o.revision;
          }
          if (more) return true;
          return this.finishResync(f, resync);
        });
      }
    }
    if (f.changesAfter >= this.knownRevision) return false;
    const target = this.knownRevision;
    const fence = this.host.fence();
    const fetched = fence && (await fetchDesiredChanges(sql, fence, f.changesAfter, page, maxBytes, f.opsFloor));
    if (!fetched) return this.claimLost();
    const { rows: changes, more } = fetched;
    if (this.progress !== f) return false;
    const ids = await this.recordOperationStarts(changes.flatMap((c) => (c.kind === 'operation' ? [c.payload] : [])));
    if (!ids) return this.claimLost();
    if (this.progress !== f) return false;
    return this.host.batch(() => {
      for (const c of changes) {
        const o =
          c.kind === 'deployment'
            ? { ...frame('deployment.desired', c.payload, null), revision: c.revision }
            : { ...frame('operation.start', c.payload, null, { t: 'watermark', revision: c.revision }, ids.get(c.payload.operation_id)), revision: c.revision };
        if (!this.host.enqueue(o)) return false;
        f.changesAfter = c.revision;
      }
      if (!more) {
        // Everything up to the revision known before the fetch is now queued (skipped rows included).
        f.changesAfter = Math.max(f.changesAfter, target);
        return this.host.enqueue({ kind: 'marker', effect: { t: 'watermark', revision: target } });
      }
      return true;
    });
  }

  /**
   * A read, or the record of operation starts, found the session's claim gone (displaced,
   * disabled, token rotated): nothing is queued, and the session checks its claim now, which
   * cuts it, instead of at its next poll.
   */
  private claimLost(): false {
    this.host.log().warn('desired-state read or operation record refused: the session no longer holds its claim; checking it now');
    this.host.claimLost();
    return false;
  }

  /**
   * Queue one page of the resync snapshot; the last page (`more` false: it reached neither its
   * row nor its byte bound) ends the stream (stream.end) and moves on to the open operations.
   * False when the queue refused a frame (the connection is closing).
   */
  private queueSnapshotPage(f: FetchState, resync: HubResync, rows: readonly Payload<'deployment.desired'>[], more: boolean): boolean {
    for (const p of rows) {
      if (!this.host.enqueue(frame('deployment.desired', p, resync.beginId, { t: 'resync_item', deploymentId: p.deployment_id, revision: p.revision }))) return false;
      f.snapshotAfter = p.deployment_id;
      if (p.revision > f.snapshotMax) f.snapshotMax = p.revision;
    }
    if (more) return true;
    f.stage = 'ops';
    return this.host.enqueue({
      kind: 'frame',
      type: 'stream.end',
      payload: () => ({ complete: true, count: this.host.meta()?.hubResync?.count ?? 0 }),
      replyTo: resync.beginId,
      effect: { t: 'resync_end' },
    });
  }

  /** Every open operation is queued: the resync is over once what is queued is written. */
  private finishResync(f: FetchState, resync: HubResync): boolean {
    f.stage = 'done';
    f.changesAfter = Math.max(f.changesAfter, resync.revision);
    // A page read after the claim may have carried a deployment at a revision above it: the
    // changes up to there are fetched (as Postgres holds them now), not taken from a poke that
    // carries a deployment as it was when written, which could be older than the one just sent.
    this.learn(f.snapshotMax);
    return this.host.enqueue({ kind: 'marker', effect: { t: 'resync_done' } });
  }

  /**
   * A fresh session's resync from the page its claim read (claim-snapshot.ts), queued in the
   * same turn as the welcome, so a resync that fits the page is numbered and stored in the
   * welcome's commit with no fetch at all: begin, the deployments, stream.end, and (with no open
   * operation to deliver) the end of the resync. Whatever the page did not cover (more
   * deployments, open operations, later changes) the fetch goes on to, as it does without a
   * seed. `limit` is the most rows the claim was asked for.
   */
  seed(snapshot: ClaimSnapshot, limit: number): void {
    const meta = this.host.meta();
    const resync = meta?.hubResync;
    const f = this.progress;
    if (resync && f.stage === 'begin' && !this.pumping && this.host.connected()) {
      // Queuing writes at once, and a write asks the pump to run: it must not fetch the page
      // this seed is still queuing.
      this.pumping = true;
      try {
        this.host.batch(() => {
          f.stage = 'pages';
          const queued =
            this.host.enqueue(frame('resync.begin', { scope: ['deployment'] }, null, { t: 'resync_begin' }, resync.beginId)) &&
            this.queueSnapshotPage(f, resync, snapshot.deployments, snapshot.more || snapshot.deployments.length >= limit);
          if (queued && this.progress.stage === 'ops' && !snapshot.openOperations) this.finishResync(f, resync);
        });
      } finally {
        this.pumping = false;
      }
    }
    void this.run();
  }

  /**
   * Record the ids of the operation.start frames about to be queued, before any is sent: an
   * operator's error replying to one correlates on that id alone, in whichever session it comes
   * back. A failure throws (nothing unrecorded is sent). Null when this session no longer owns the
   * cluster.
   */
  private async recordOperationStarts(ops: Payload<'operation.start'>[]): Promise<Map<string, string> | null> {
    const ids = new Map<string, string>();
    if (ops.length === 0) return ids;
    if (this.unqueuedStartIds.size > UNQUEUED_START_IDS_MAX) this.unqueuedStartIds.clear();
    for (const o of ops) {
      const id = this.unqueuedStartIds.get(o.operation_id) ?? newId();
      this.unqueuedStartIds.set(o.operation_id, id);
      ids.set(o.operation_id, id);
    }
    const fence = this.host.fence();
    if (!fence) return null;
    const fenced = await markOperationsSent(this.host.sql, fence, [...ids].map(([operation_id, frame_id]) => ({ operation_id, frame_id })));
    return fenced ? ids : null;
  }
}

function frame<T extends MessageType>(type: T, payload: Payload<T>, replyTo: string | null, effect?: Effect, id?: string): Extract<Outgoing, { kind: 'frame' }> {
  return { kind: 'frame', type, payload: () => payload, replyTo, ...(effect ? { effect } : {}), ...(id ? { id } : {}) };
}
