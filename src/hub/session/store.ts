import type { OutboundState, Payload, ReplayEntry, ReplayStore } from '../../protocol';
import type { SessionSql } from './schema';

/**
 * Everything a session needs after hibernation or eviction lives in its object's SQLite. Memory
 * is only a cache of this.
 */
export interface SessionMeta {
  sessionId: string;
  clusterUid: string;
  clusterName: string;
  /** Hex SHA-256 of the enrollment token the session was opened with. */
  tokenHash: string;
  routeKey: string;
  openedAt: number;
  generation: number;
  /** Contiguous cursor of the operator's stream: applied in Postgres. */
  inCursor: number;
  out: OutboundState;
  /** Highest per-cluster desired revision already put into this session's stream. */
  desiredWatermark: number;
  /**
   * The highest revision a deployment of the hub's resync snapshot carried when written. A page
   * read after the claim can carry revisions above the resync's own, so a change at or below this
   * one may name a deployment older than the one already sent: the pump fetches such changes as
   * Postgres holds them now instead of taking them from a poke. Stored, because an eviction
   * between the page and that fetch (or a poke arriving late) would otherwise forget it. Absent:
   * none above the watermark (or a record of an older hub).
   */
  desiredSeen?: number;
  /**
   * How many ingest statements of this session are known to have committed, as the owner row
   * counts them (`cluster_owners.ingest_commits`): a database counting fewer went back (restored
   * from a backup). Absent: none yet (or a record of an older hub).
   */
  ingestCommits?: number;
  /**
   * The revision up to which the session's resync delivered every open operation. An incomplete
   * resync leaves the watermark below it (the changes after the watermark are sent again, for the
   * withdrawals), and those changes must not deliver the same operations a second time. Absent:
   * no resync has ended (or a record of an older hub).
   */
  opsRedeliveredThrough?: number;
  /**
   * Operator resync streams open as of the last applied batch (which may be past a hole, ahead
   * of inCursor: each stream knows which of its members it has counted, so a member replayed
   * after a resume is not counted twice).
   */
  opResyncs: Record<string, OpResync>;
  /** The hub's own resync stream in progress, if any. */
  hubResync: HubResync | null;
  lastFrameAt: number;
  /** When the last connection closed; null while connected. */
  disconnectedAt: number | null;
  /**
   * Since when frames sent on the connection have waited for the operator's ack to move (the
   * later of the first write nothing acked covers and the last ack that moved); null or absent
   * when nothing waits. Stored, because an object waiting on an ack may be evicted between pings.
   */
  ackWaitSince?: number | null;
  /** The unacknowledged frames were sent again since the ack last moved: the next resend sends only the first (send-path.ts). Absent: not. */
  ackResent?: boolean;
  /**
   * Since when frames or answers owed have waited for the operator to release its replay window,
   * and its ack then: the wait goes on while the ack stands (4429 after IDLE_TIMEOUT_MS). Stored,
   * because the answers owed outlive an eviction between the operator's pings, and nothing drains
   * them again after the wake while the window stays full. Absent or null: no wait.
   */
  windowWait?: { since: number; ack: number } | null;
  /**
   * Seqs past `inCursor` whose frames `counters` already counts (committed past a hole), as
   * sorted, disjoint, inclusive ranges: a resume replays them and they are not counted again.
   * Absent on a record of an older hub.
   */
  countedAhead?: [number, number][];
  counters: SessionCounters;
}

export interface OpResync {
  beginSeq: number;
  scope: string[];
  /** Frames carried so far with reply_to = the begin's id, each counted once. */
  count: number;
  /**
   * The seqs counted, as sorted, disjoint, inclusive ranges. A member applied past a hole is
   * delivered again after a resume (the operator replays from the cursor): it is counted once.
   * Absent on a stream recorded by an older hub (then counted as before, by arrival).
   */
  counted?: [number, number][];
  /** A frame inside the stream was rejected that could describe a kind it prunes: prune nothing against it. */
  tainted: boolean;
  /**
   * When its begin arrived (ms): the admin view shows since when the oldest stream is open, since
   * a begin that no end follows is never pruned against and nothing else ends it. Absent on a
   * stream recorded by an older hub.
   */
  beganAt?: number;
}

export interface HubResync {
  beginId: string;
  /** The desired revision when the snapshot started; changes after it follow as ordinary frames. */
  revision: number;
  /** Keyset cursor over deployment_id: the last deployment written into the stream. */
  after: string | null;
  /** Frames written with reply_to = beginId: stream.end's count. */
  count: number;
  /** What remains: the begin, the snapshot pages (then stream.end), or redelivering open operations. */
  stage: 'begin' | 'pages' | 'ops';
  /**
   * The revision of the last open operation redelivered into the stream (they go in revision
   * order). A resume or an eviction before the redelivery ends goes on after it: the ones before
   * are in the replay buffer already. Absent: none yet (or a record of an older hub).
   */
  opsAfter?: number;
  /**
   * A deployment of the snapshot was too large to send (send-path.ts): the stream ends
   * `complete: false`, so the operator prunes nothing against a set it did not receive whole.
   */
  incomplete?: boolean;
}

export interface SessionCounters {
  duplicates: number;
  unknownTypes: number;
  /** Frames recorded as rejections: poison, refused by the batch (a hub-only type, a stream.end for no open stream), an unknown operation. Unknown types are counted apart. */
  rejections: number;
  framesIn: number;
  framesOut: number;
  resyncsCompleted: number;
  resyncsIncomplete: number;
  pruned: number;
  /** Errors from the operator answering a deployment.desired (it could not render it). */
  desiredRefusals: number;
  /** Operator frames answered with an error and recorded as rejections (poison, unknown operation…). */
  answeredRejections: number;
}

export const ZERO_COUNTERS: SessionCounters = {
  duplicates: 0,
  unknownTypes: 0,
  rejections: 0,
  framesIn: 0,
  framesOut: 0,
  resyncsCompleted: 0,
  resyncsIncomplete: 0,
  pruned: 0,
  desiredRefusals: 0,
  answeredRejections: 0,
};

/**
 * How many sent deployment.desired frames stay resolvable for an operator's error reply, at the
 * least: never fewer than the replay window holds frames (`SessionStore`).
 */
const SENT_DESIRED_KEEP = 20_000;

// A bound value is limited to 2 MB in Durable Object SQLite. A chunk is bound as JSON, which
// escapes every `"` and `\` of a frame once more (up to twice its size): chunks hold at most
// half of the limit, counted with each entry's own overhead. A frame too large to share a chunk
// is bound alone, as itself (the send path sends none over what a row holds).
const FLUSH_CHUNK_BYTES = 800_000;
const ENTRY_OVERHEAD_BYTES = 32;
const ALONE_BYTES = FLUSH_CHUNK_BYTES / 2;

type Row3 = readonly [string | number, string | number, string | number];

/** Each table's insert of one row bound as itself, and of several bound as one JSON array. */
const INSERTS = {
  replay: {
    one: 'insert or replace into replay (seq, frame, bytes) values (?, ?, ?)',
    many: `insert or replace into replay (seq, frame, bytes)
       select json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') from json_each(?)`,
  },
  sent_desired: {
    one: 'insert or replace into sent_desired (frame_id, deployment_id, revision) values (?, ?, ?)',
    many: `insert or replace into sent_desired (frame_id, deployment_id, revision)
       select json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') from json_each(?)`,
  },
} as const;

/**
 * Insert (or replace) rows in one statement. A lone row (a single change's frame, a lone answer)
 * is bound as itself: encoding it as JSON for SQLite to decode with json_each cost more than the
 * row (bench/MICRO.md, "The single desired change, two hub trees side by side").
 */
function insertRows(sql: SessionSql, table: keyof typeof INSERTS, rows: readonly Row3[]): void {
  if (rows.length === 1) {
    const [a, b, c] = rows[0] as Row3;
    sql.exec(INSERTS[table].one, a, b, c);
  } else if (rows.length > 1) sql.exec(INSERTS[table].many, JSON.stringify(rows));
}

export class SessionStore {
  readonly replay: SqliteReplayStore;
  readonly owed: OwedAnswers;
  /**
   * Rows in sent_desired, roughly (exact after a trim); null until the first record after
   * construction reads it. Counted up from 0 instead, it never reached the trim: an idle session
   * is constructed again at nearly every wake.
   */
  private sentDesired: number | null = null;
  /**
   * The newest sent deployment.desired frames kept. The operator answers a frame before it
   * acknowledges anything past it, and the hub sends at most `replayWindowFrames` past the
   * operator's ack: any frame it can still refuse is among that many. Fewer, and a large resync
   * (30,000 deployments inside the default window of 50,000) lost the refusal of its first frames.
   */
  private readonly sentDesiredKeep: number;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly sql: SessionSql,
    replayWindowFrames = 0,
  ) {
    this.replay = new SqliteReplayStore(sql);
    this.owed = new OwedAnswers(sql);
    this.sentDesiredKeep = Math.max(SENT_DESIRED_KEEP, replayWindowFrames);
  }

  /**
   * Run `writes` as one transaction: every one of them is stored, or, when one throws, none.
   * Memory that moved with them must then be read again (`dropCaches`, SessionState.reload).
   */
  atomically<T>(writes: () => T): T {
    return this.storage.transactionSync(writes);
  }

  /** Forget what memory holds of storage (after a failed write): each part is read again when next needed. */
  dropCaches(): void {
    this.sql.recheck();
    this.replay.dropCache();
    this.owed.dropCache();
    this.sentDesired = null;
  }

  /** After `destroy` (deleteAll drops the tables; the next write creates them). */
  reinit(): void {
    this.sql.dropped();
    this.replay.clear();
    this.owed.forgotten();
    this.sentDesired = 0;
  }

  loadMeta(): SessionMeta | null {
    if (this.sql.fresh) return null;
    const row = this.sql.exec<{ doc: string }>('select doc from meta where k = 1').toArray()[0];
    if (!row) return null;
    const meta = JSON.parse(row.doc) as SessionMeta;
    meta.counters = { ...ZERO_COUNTERS, ...meta.counters };
    return meta;
  }

  saveMeta(meta: SessionMeta): void {
    this.sql.exec(
      'insert into meta (k, doc) values (1, ?) on conflict (k) do update set doc = excluded.doc',
      JSON.stringify(meta),
    );
  }

  /**
   * Which deployment (and revision) each deployment.desired frame carried, so an operator's
   * error replying to one can be recorded against it. The operator acknowledges a frame it
   * refuses before (or with) its error, so the replay buffer cannot answer this.
   */
  recordSentDesired(entries: readonly [frameId: string, deploymentId: string, revision: number][]): void {
    if (entries.length === 0) return;
    this.sentDesired ??= this.sql.fresh ? 0 : this.sql.exec<{ n: number }>('select count(*) as n from sent_desired').one().n;
    // One drain can number a whole send queue (SEND_QUEUE_FRAMES, 20,000 by default) after a large
    // ack: bound as one JSON value, that many rows with long deployment ids passed SQLite's 2 MB
    // value limit, and the drain failed (1011) with its frames numbered and unsent, again at each
    // resume.
    for (let i = 0; i < entries.length; i += SENT_DESIRED_CHUNK) insertRows(this.sql, 'sent_desired', entries.slice(i, i + SENT_DESIRED_CHUNK));
    this.sentDesired += entries.length;
    if (this.sentDesired > this.sentDesiredKeep * 1.5) {
      // ULIDs sort by time: keep the newest.
      this.sql.exec(
        'delete from sent_desired where frame_id < (select frame_id from sent_desired order by frame_id desc limit 1 offset ?)',
        this.sentDesiredKeep,
      );
      this.sentDesired = this.sentDesiredKeep;
    }
  }

  sentDesiredFrame(frameId: string): { deploymentId: string; revision: number } | null {
    if (this.sql.fresh) return null;
    const r = this.sql
      .exec<{ deployment_id: string; revision: number }>('select deployment_id, revision from sent_desired where frame_id = ?', frameId)
      .toArray()[0];
    return r ? { deploymentId: r.deployment_id, revision: r.revision } : null;
  }

  /**
   * Forget the session entirely (retention expired). One call: at this compatibility date
   * (2026-02-24 or later) deleteAll deletes the alarm with the data, atomically, where a
   * deleteAlarm before it left a crash window with a record and no alarm to ever delete it.
   */
  async destroy(): Promise<void> {
    await this.storage.deleteAll();
  }
}

/**
 * An error the hub owes the operator in answer to one of its frames (an unknown type, a rejected
 * frame), not yet numbered. The operator never resends a frame the hub acknowledged, so once the
 * cursor passes the frame this answer is the only trace of the reply: it is stored no later than
 * that cursor, and leaves in the commit that numbers it into the replay buffer.
 */
export interface OwedAnswer {
  /** Storage order: answers leave in the order they were owed. */
  n: number;
  /** The frame id it will be sent with (chosen when owed, so a resend after a crash is the same frame). */
  id: string;
  /** The operator frame it answers: past the cursor at a resume, the operator replays that frame and it is answered again. */
  seq: number;
  replyTo: string | null;
  payload: Payload<'error'>;
}

// Bound values are limited to 2 MB: an answer is at most a few KB once escaped as JSON.
const OWED_INSERT_CHUNK = 200;
/** sent_desired rows per statement: at the longest ids (a ULID, 253 characters), under 700 KB. */
const SENT_DESIRED_CHUNK = 2_000;

/** The answers owed, in the object's SQLite; read once per construction, then cached. */
export class OwedAnswers {
  private cache: OwedAnswer[] | null = null;
  private nextN = 1;

  constructor(private readonly sql: SessionSql) {}

  /** Oldest first. */
  list(): readonly OwedAnswer[] {
    return this.load();
  }

  get count(): number {
    return this.load().length;
  }

  add(answers: readonly Omit<OwedAnswer, 'n'>[]): void {
    if (answers.length === 0) return;
    const cache = this.load();
    const rows = answers.map((a) => ({ ...a, n: this.nextN++ }));
    for (let i = 0; i < rows.length; i += OWED_INSERT_CHUNK) {
      this.sql.exec(
        `insert or replace into owed (n, id, seq, doc)
         select json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]') from json_each(?)`,
        JSON.stringify(rows.slice(i, i + OWED_INSERT_CHUNK).map((r) => [r.n, r.id, r.seq, JSON.stringify({ replyTo: r.replyTo, payload: r.payload })])),
      );
    }
    cache.push(...rows);
  }

  /** The oldest `count` were numbered (in the replay buffer now, in the same commit). */
  taken(count: number): void {
    const cache = this.load();
    const last = cache[Math.min(count, cache.length) - 1];
    if (!last) return;
    this.sql.exec('delete from owed where n <= ?', last.n);
    cache.splice(0, count);
  }

  /**
   * Drop the answers to frames past `cursor`: the operator replays those frames and they are
   * answered again. Except those `committed` (past a hole, SessionMeta.countedAhead): their replay
   * is applied but not answered again (inbound.ts), so the answer owed is the only one.
   */
  dropAfter(cursor: number, committed: (seq: number) => boolean): void {
    const cache = this.load();
    const kept = cache.filter((a) => a.seq <= cursor || committed(a.seq));
    if (kept.length === cache.length) return;
    const keptN = new Set(kept.map((a) => a.n));
    const dropped = cache.filter((a) => !keptN.has(a.n)).map((a) => a.n);
    this.sql.exec('delete from owed where n in (select value from json_each(?))', JSON.stringify(dropped));
    this.cache = kept;
  }

  /** A fresh session: numbering restarts and the old stream's answers go with its replay buffer. */
  clear(): void {
    if (this.load().length > 0) this.sql.exec('delete from owed');
    this.cache = [];
  }

  /** Storage may differ from memory (a rolled-back write): read it again when next needed. */
  dropCache(): void {
    this.cache = null;
  }

  /** The storage was deleted. */
  forgotten(): void {
    this.cache = [];
    this.nextN = 1;
  }

  private load(): OwedAnswer[] {
    if (this.cache) return this.cache;
    if (this.sql.fresh) return (this.cache = []);
    this.cache = this.sql
      .exec<{ n: number; id: string; seq: number; doc: string }>('select n, id, seq, doc from owed order by n')
      .toArray()
      .map((r) => {
        const doc = JSON.parse(r.doc) as Pick<OwedAnswer, 'replyTo' | 'payload'>;
        return { n: r.n, id: r.id, seq: r.seq, replyTo: doc.replyTo, payload: doc.payload };
      });
    this.nextN = (this.cache[this.cache.length - 1]?.n ?? 0) + 1;
    return this.cache;
  }
}

/** The hub's replay buffer in the object's SQLite; appends are batched into one statement. */
export class SqliteReplayStore implements ReplayStore {
  private pending: ReplayEntry[] = [];
  /** Frames and bytes in the buffer; read from the table when first needed (null: not yet). */
  private sizes: { count: number; total: number } | null = null;

  constructor(private readonly sql: SessionSql) {}

  private get size(): { count: number; total: number } {
    if (this.sizes) return this.sizes;
    if (this.sql.fresh) return (this.sizes = { count: 0, total: 0 });
    // Lazily: a wake that only answers the clock or a poke never needs the buffer's size.
    const r = this.sql
      .exec<{ n: number; b: number }>('select count(*) as n, coalesce(sum(bytes), 0) as b from replay')
      .toArray()[0];
    this.sizes = { count: r?.n ?? 0, total: r?.b ?? 0 };
    return this.sizes;
  }

  append(entry: ReplayEntry): void {
    const size = this.size;
    this.pending.push(entry);
    size.count++;
    size.total += entry.bytes;
  }

  /** Write buffered appends. Must run before the frames are sent: never send what is not durable. */
  flush(): void {
    let i = 0;
    while (i < this.pending.length) {
      const first = this.pending[i] as ReplayEntry;
      if (first.bytes > ALONE_BYTES) {
        insertRows(this.sql, 'replay', [[first.seq, first.frame, first.bytes]]);
        i++;
        continue;
      }
      let bytes = 0;
      const chunk: [number, string, number][] = [];
      // The first always fits: it is no larger than ALONE_BYTES.
      while (i < this.pending.length) {
        const e = this.pending[i] as ReplayEntry;
        if (e.bytes > ALONE_BYTES || bytes + e.bytes + ENTRY_OVERHEAD_BYTES > FLUSH_CHUNK_BYTES) break;
        chunk.push([e.seq, e.frame, e.bytes]);
        bytes += e.bytes + ENTRY_OVERHEAD_BYTES;
        i++;
      }
      insertRows(this.sql, 'replay', chunk);
    }
    this.pending = [];
  }

  releaseThrough(through: number): void {
    this.flush();
    const r = this.sql
      .exec<{ n: number; b: number }>(
        'select count(*) as n, coalesce(sum(bytes), 0) as b from replay where seq <= ?',
        through,
      )
      .toArray()[0];
    if (!r || r.n === 0) return;
    const size = this.size;
    this.sql.exec('delete from replay where seq <= ?', through);
    size.count -= r.n;
    size.total -= r.b;
  }

  shiftOldest(): ReplayEntry | undefined {
    this.flush();
    const e = this.sql
      .exec<{ seq: number; frame: string; bytes: number }>('select seq, frame, bytes from replay order by seq limit 1')
      .toArray()[0];
    if (!e) return undefined;
    const size = this.size;
    this.sql.exec('delete from replay where seq = ?', e.seq);
    size.count--;
    size.total -= e.bytes;
    return { seq: e.seq, frame: e.frame, bytes: e.bytes };
  }

  /**
   * The operation id of the newest operation.start frame still held, if any. A hub resync
   * recorded by a hub before `HubResync.opsAfter` was stored leaves its redelivery's progress
   * only here (desired-pump.ts).
   */
  lastOperationStart(): string | null {
    this.flush();
    if (this.sql.fresh) return null;
    const row = this.sql
      .exec<{ id: string | null }>(
        `select json_extract(frame, '$.payload.operation_id') as id from replay
         where json_extract(frame, '$.type') = 'operation.start' order by seq desc limit 1`,
      )
      .toArray()[0];
    return typeof row?.id === 'string' ? row.id : null;
  }

  /**
   * Send every frame after `after`, in order, straight from the table's cursor: a resume or a
   * re-send holds one frame at a time, not the whole buffer (up to REPLAY_BUFFER_BYTES, half an
   * object's memory at the default; twice that as JavaScript strings when a frame is not ASCII).
   */
  sendAfter(after: number, send: (frame: string) => void, limit = Number.POSITIVE_INFINITY): { count: number; firstSeq: number | null } {
    this.flush();
    let count = 0;
    let firstSeq: number | null = null;
    for (const row of this.sql.exec<{ seq: number; frame: string }>('select seq, frame from replay where seq > ? order by seq', after)) {
      if (count >= limit) break;
      firstSeq ??= row.seq;
      count++;
      send(row.frame);
    }
    return { count, firstSeq };
  }

  entriesAfter(after: number): ReplayEntry[] {
    this.flush();
    return this.sql
      .exec<{ seq: number; frame: string; bytes: number }>(
        'select seq, frame, bytes from replay where seq > ? order by seq',
        after,
      )
      .toArray()
      .map((e) => ({ seq: e.seq, frame: e.frame, bytes: e.bytes }));
  }

  /** Storage may differ from memory (a rolled-back write): appends not flushed are dropped, sizes read again. */
  dropCache(): void {
    this.pending = [];
    this.sizes = null;
  }

  clear(): void {
    this.pending = [];
    if (!this.sql.fresh) this.sql.exec('delete from replay');
    this.sizes = { count: 0, total: 0 };
  }

  get frames(): number {
    return this.size.count;
  }

  get bytes(): number {
    return this.size.total;
  }
}
