/**
 * The operator SDK's client: one cluster's side of the Wingsmith plane–operator link.
 *
 * ```ts
 * const client = new OperatorClient({
 *   url: 'wss://hub.example.com',               // …/v1/connect is appended when missing
 *   token: process.env.WINGSMITH_TOKEN,         // this cluster's enrollment token
 *   clusterId: 'gpu-east-1',                    // the cluster's uid or name
 *   operatorVersion: '0.4.2',
 *   cursorStore: new FileCursorStore('/var/lib/op/cursor.json'),
 *   outboundLog: await FileOutboundLog.open('/var/lib/op/outbound.log'), // optional, see below
 *   handlers: { desired, pruneDesired, operation },
 *   snapshot: () => ({ cluster, nodes, devices, deployments }),         // for resync
 * });
 * await client.start();
 * client.reportNode({...}); client.emitEvent('node', {...});
 * await client.stop();                          // graceful: drain acks, persist, close 1000
 * ```
 *
 * What it does, in the spec's terms:
 * - Dials `GET /v1/connect` with `Authorization: Bearer <token>` and, when resuming,
 *   `Wingsmith-Session: <session_id>`; sends `hello` first and only once; writes no sequenced
 *   frame before `welcome`.
 * - Fresh session (`full_resync`, or a session id other than the one asked for): numbering
 *   restarts at 1 both ways, the replay buffer is dropped, and the full observed state is
 *   streamed (`resync.begin` … `stream.end`). Resume: the unreleased frames after
 *   `welcome.ack_seq` are re-sent with their original text and the inbound expectation is
 *   rewound to cursor + 1, so the hub's replay is applied rather than dropped as duplicates.
 * - Durability ("ack means durably processed"): the cursor store is saved before any frame
 *   carrying a new cursor as `ack` is written; with a `FileOutboundLog` each batch of sequenced
 *   frames is fsynced before it is written to the socket. With the default in-memory buffer a
 *   crash means `lossy: true` on the next hello (a fresh session); a graceful stop drains acks so
 *   the restart resumes. After any unclean stop the client streams an observed resync once the
 *   session opens, because frames queued but never numbered died with the process.
 * - Receive side: strict order (duplicates dropped, a gap closes the link), handler outcomes as
 *   in `handlers.ts`, unknown types and poison frames answered and acked, hub `error` frames
 *   logged and never fatal, the hub's desired snapshot pruned only after a complete stream (and
 *   a restart in the middle of one says `lossy`, so a whole new snapshot follows).
 * - Acks ride on every outgoing frame; when the cursor moved and nothing else went out within
 *   `ackDelayMs` an `ack` frame carries it.
 * - Liveness: `ping` every `pingIntervalMs` (else the hub's `limits.ping_interval_s`, else 10 s);
 *   the link is closed (4408) after `idleTimeoutMs` (else the hub's `idle_timeout_s`, else 30 s)
 *   without any frame; no `welcome` within `handshakeTimeoutMs` of `hello` closes it too. Pings
 *   are the canonical text (no id, no ts) so an idle operator's pings are byte-identical.
 *   Reconnects forever: exponential backoff 1 s → 30 s with full jitter; the attempt count resets
 *   once a session stayed up `stableAfterMs`.
 * - Refusals (refusal.ts): one `refused` event and one log line each; those the hub will not
 *   reverse by itself wait the whole cap; on 4409 the displaced session is forgotten and the
 *   next hello asks for a new one.
 * - Backpressure: the protocol core's coalescing `OperatorSendQueue`; frames are numbered when
 *   written, and never more than `limits.replay_buffer_frames` / `_bytes` are unacked at once.
 *   Drop counters go to the hub in `link.stats`.
 */
import { EventEmitter } from 'node:events';
import {
  buildFrame,
  canonicalPing,
  canonicalPong,
  CloseCode,
  InboundSequencer,
  newId,
  OutboundSequencer,
  readFrame,
  utf8Length,
  type Envelope,
  type Incoming,
  type OperatorQueueCounters,
  type OutboundState,
  type Payload,
  type PushOutcome,
  type ReplayEntry,
} from '../protocol';
import { Backoff, DEFAULT_BACKOFF, type BackoffPolicy } from './backoff';
import { CorruptCursorStoreError, emptyRecord, FileCursorStore, type CursorStore, type DurableRecord } from './cursor-store';
import { assertHandlers, type OperatorHandlers } from './handlers';
import { dispatch, type DispatchCounters, type DispatchHost, type Settled } from './inbound-dispatch';
import { LinkStatsReporter, type LinkCounters } from './link-stats';
import { jsonLogger, type Logger } from './logger';
import { OperationBook, type OperationBookOptions } from './operations';
import { decideResumeBase } from './resume-base';
import { MemoryOutboundLog, type OutboundLog } from './outbound-log';
import { checkedPayload, outItem, type OutItem } from './outgoing';
import { Outbox } from './outbox';
import { classifyClose, httpRefusalError, refusalLogLine, type RefusalError, type RefusalKind } from './refusal';
import { InboundResyncs, ObservedResync, type ObservedSnapshot } from './resync';
import { systemTimers, type Timers } from './timers';
import { connectUrl, type Dialer, type Transport } from './transport';
import { wsDialer } from './ws-transport';

export type Limits = Payload<'welcome'>['limits'];

export interface OperatorClientOptions {
  /** The hub: `https://…`, `wss://…` or the full `wss://…/v1/connect`. */
  url: string;
  /** This cluster's enrollment token. */
  token: string;
  /** The cluster's uid or name; must name the cluster the token belongs to. */
  clusterId: string;
  operatorVersion: string;
  cursorStore: CursorStore;
  /** The outbound replay buffer. Default: in memory (a crash then costs a fresh session). */
  outboundLog?: OutboundLog;
  handlers: OperatorHandlers;
  /** The complete observed state, for resync. Called once per resync. */
  snapshot: () => ObservedSnapshot | Promise<ObservedSnapshot>;
  logger?: Logger;
  timers?: Timers;
  /** Uniform in [0, 1): the backoff's jitter. */
  random?: () => number;
  /** How to open the WebSocket. Default: the `ws` package. */
  dial?: Dialer;
  pingIntervalMs?: number;
  idleTimeoutMs?: number;
  /** No `welcome` this long after `hello`: close (4408) and back off. Default 10 s (the spec). */
  handshakeTimeoutMs?: number;
  backoff?: Partial<BackoffPolicy>;
  /** A session up this long resets the backoff. Default 10 s. */
  stableAfterMs?: number;
  /** Wait this long for another frame to carry a new cursor before sending an `ack`. Default 50 ms. */
  ackDelayMs?: number;
  /** At most one `link.stats` per this interval. Default 5 s. */
  statsIntervalMs?: number;
  /**
   * After the send queue evicted a state frame (backpressure), stream a fresh observed snapshot
   * this long afterwards, so the hub observes the lost statement again. At most one per
   * interval. Default 1 s.
   */
  reobserveDelayMs?: number;
  /** How long a graceful stop waits for acks and running operations. Default 10 s. */
  drainTimeoutMs?: number;
  /** Send queue capacity in frames. Default 4096. */
  sendQueueCapacity?: number;
  /**
   * Most control frames (error replies, operation reports) waiting to be written. At the bound
   * no hub frame is applied (its ack is withheld, so the hub's window stops it sending) and
   * operation progress is dropped. Default: `sendQueueCapacity`, at least 64.
   */
  controlQueueLimit?: number;
  /** Retry delays for a frame whose handler failed transiently. Default 500 ms → 30 s. */
  retry?: Partial<BackoffPolicy>;
  operations?: OperationBookOptions;
}

export type ClientState = 'idle' | 'connecting' | 'handshaking' | 'open' | 'waiting' | 'stopping' | 'stopped';

export interface ClientEvents {
  state: [ClientState];
  /** A session opened. `fresh`: numbering restarted and a resync follows. `region`: the hub's region, null if it names none. */
  welcome: [{ sessionId: string; fresh: boolean; hubVersion: string; limits: Limits; region: string | null }];
  /** The link closed. `error`: the connection-level error the hub sent before closing, if any. */
  closed: [{ code: number; reason: string; httpStatus: number | null; welcomed: boolean; error: RefusalError | null }];
  /**
   * The hub refused this operator (refusal.ts): not an enrollment token (HTTP 401/403), not
   * registered, disabled or token rotated (4403), displaced by another operator (4409), or a
   * handshake it explained with an error (another major, the wrong cluster id, registry down).
   * `retryInMs`: when the next attempt is (the whole backoff cap unless the error was retryable).
   */
  refused: [RefusedEvent];
  hubError: [{ payload: Payload<'error'>; replyTo: string | null; seq: number | null }];
  /** Local desired deployments were pruned against a complete hub snapshot. */
  pruned: [{ keep: ReadonlySet<string> }];
  stopped: [];
}

export interface RefusedEvent {
  kind: RefusalKind;
  closeCode: number;
  /** The same as `closeCode` (the field's first name). */
  code: number;
  httpStatus: number | null;
  error: RefusalError | null;
  reason: string;
  retryInMs: number;
}

export interface ClientStats extends DispatchCounters {
  epoch: string;
  queue: OperatorQueueCounters;
  queued: number;
  unacked: number;
  framesIn: number;
  framesOut: number;
  duplicates: number;
  gaps: number;
  transientFailures: number;
  oversizeFrames: number;
  connects: number;
  sessionsOpened: number;
  freshSessions: number;
  resyncsSent: number;
}

interface Link {
  transport: Transport | null;
  gen: number;
  welcomed: boolean;
  welcomedAt: number;
  ended: boolean;
  closing: boolean;
  /** Highest cursor written as `ack` on this link. */
  lastAckSent: number;
  lastFrameAt: number;
  replay: ReplayEntry[] | null;
  /** The connection-level error (`seq: null`) the hub sent on this link: why it is closing it. */
  connectionError: RefusalError | null;
  cancelPing: () => void;
  cancelIdle: () => void;
  cancelHandshake: () => void;
}

const NOOP = () => {};
/** The sequencer's own overflow bound is not what limits the window; the hub's limits are. */
const UNBOUNDED = { frames: Number.MAX_SAFE_INTEGER, bytes: Number.MAX_SAFE_INTEGER };
const DEFAULT_LIMITS: Limits = {
  ping_interval_s: 10,
  idle_timeout_s: 30,
  max_frame_bytes: 1024 * 1024,
  replay_buffer_frames: 10_000,
  replay_buffer_bytes: 64 * 1024 * 1024,
};

export class OperatorClient extends EventEmitter<ClientEvents> {
  private readonly opts: OperatorClientOptions;
  private readonly url: string;
  private readonly timers: Timers;
  private readonly log: Logger;
  private readonly dial: Dialer;
  private readonly backoff: Backoff;
  private readonly retryPolicy: BackoffPolicy;
  private readonly outbox: Outbox;
  private readonly linkStats: LinkStatsReporter;
  private readonly streams = new InboundResyncs();
  private readonly appliedRevision = new Map<string, number>();
  private readonly buffer: OutboundLog;

  private current: ClientState = 'idle';
  private outbound!: OutboundSequencer;
  private inbound!: InboundSequencer;
  private book!: OperationBook;
  private sessionId: string | null = null;
  /** The session this operator was displaced from (kept for diagnostics, never resumed). */
  private displacedSession: string | null = null;
  private lossy = false;
  private limits: Limits = DEFAULT_LIMITS;
  private link: Link | null = null;
  private gen = 0;
  /** Bumped on every fresh session: work started under an older session is abandoned. */
  private sessionGen = 0;
  private resyncAfterOpen = false;
  private resyncQueued = false;
  private stopping = false;
  private stopPromise: Promise<void> | null = null;
  private starting: Promise<void> | null = null;

  // Durability bookkeeping.
  private persistedCursor = 0;
  private changeVersion = 0;
  private savedVersion = 0;
  private persisting: Promise<void> | null = null;
  private persistAgain = false;
  private cleanOnSave = false;

  // Writer.
  private pumpRequested = false;
  private pumpScheduled = false;
  private pumping = false;
  private ackDue = false;
  private cancelAck: (() => void) | null = null;
  private cancelStats: (() => void) | null = null;
  private cancelReobserve: (() => void) | null = null;
  private cancelReconnect: () => void = NOOP;
  private nextReconnectAt: number | null = null;

  // Reader.
  private inboundChain: Promise<void> = Promise.resolve();
  private inboundPending = 0;
  private readonly retries = new Set<() => void>();
  private drainWaiters: (() => void)[] = [];

  private readonly counters: ClientStats;

  constructor(options: OperatorClientOptions) {
    super();
    assertHandlers(options.handlers);
    this.opts = options;
    this.url = connectUrl(options.url);
    this.timers = options.timers ?? systemTimers;
    this.log = (options.logger ?? jsonLogger()).child({ cluster: options.clusterId });
    this.dial = options.dial ?? wsDialer();
    this.backoff = new Backoff({ ...DEFAULT_BACKOFF, ...options.backoff }, options.random ?? Math.random);
    this.retryPolicy = { baseMs: 500, capMs: 30_000, ...options.retry };
    const capacity = options.sendQueueCapacity ?? 4096;
    this.outbox = new Outbox(capacity, options.controlQueueLimit ?? Math.max(capacity, 64));
    this.buffer = options.outboundLog ?? new MemoryOutboundLog();
    const epoch = newId(this.timers.now());
    this.linkStats = new LinkStatsReporter(epoch, options.statsIntervalMs ?? 5_000);
    this.counters = {
      epoch,
      queue: { droppedEvents: 0, evictedFrames: 0, replacedFrames: 0 },
      queued: 0,
      unacked: 0,
      framesIn: 0,
      framesOut: 0,
      duplicates: 0,
      gaps: 0,
      transientFailures: 0,
      oversizeFrames: 0,
      connects: 0,
      sessionsOpened: 0,
      freshSessions: 0,
      resyncsSent: 0,
      unknownTypes: 0,
      poisonFrames: 0,
      permanentFailures: 0,
      hubErrors: 0,
      supersededDesired: 0,
      handlerFailures: 0,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // Public surface.
  // ---------------------------------------------------------------------------------------------

  get state(): ClientState {
    return this.current;
  }

  /** The session in force (null before the first welcome of a new operator). */
  get session(): {
    sessionId: string | null;
    cursor: number;
    durableCursor: number;
    outbound: OutboundState | null;
    lossy: boolean;
    limits: Limits;
    nextReconnectInMs: number | null;
  } {
    return {
      sessionId: this.sessionId,
      cursor: this.inbound?.cursor ?? 0,
      durableCursor: this.persistedCursor,
      outbound: this.outbound?.snapshot() ?? null,
      lossy: this.lossy,
      limits: { ...this.limits },
      nextReconnectInMs: this.nextReconnectAt === null ? null : Math.max(0, this.nextReconnectAt - this.timers.now()),
    };
  }

  get stats(): ClientStats {
    return {
      ...this.counters,
      queue: this.outbox.counters,
      queued: this.outbox.length,
      unacked: this.outbound?.unacked ?? 0,
    };
  }

  /** Load the durable state, then connect (and keep reconnecting) in the background. */
  start(): Promise<void> {
    if (this.current !== 'idle' || this.starting) throw new Error(`start() called in state ${this.current}`);
    this.starting = this.startNow();
    return this.starting;
  }

  private async startNow(): Promise<void> {
    this.setState('connecting');
    const record = await this.loadRecord();
    this.restore(record);
    this.book = new OperationBook(record.operations, this.operationHost(), this.opts.handlers, this.opts.operations);
    this.book.recover();
    // From here on a crash must be detectable: the record says "not clean" until a graceful stop.
    await this.persist();
    this.log.info('operator starting', {
      session: this.sessionId,
      resume_from: this.sessionId ? this.persistedCursor : null,
      lossy: this.lossy,
      durable_outbound: this.buffer.durable,
      replayable_frames: this.outbound.unacked,
      next_seq: this.outbound.nextSeq,
    });
    this.connect();
  }

  /**
   * Stop. Graceful (the default): ask running operations to stop, wait up to `timeoutMs` for
   * everything sent to be acknowledged and the cursor to be acked, persist (marked clean when
   * nothing was left over), close with 1000. Not graceful: persist as unclean and close now.
   */
  stop(options: { graceful?: boolean; timeoutMs?: number } = {}): Promise<void> {
    this.stopPromise ??= this.stopNow(options.graceful ?? true, options.timeoutMs ?? this.opts.drainTimeoutMs ?? 10_000);
    return this.stopPromise;
  }

  reportCluster(payload: Payload<'cluster.observed'>): PushOutcome {
    return this.enqueue(outItem('cluster.observed', checkedPayload('cluster.observed', payload)));
  }

  reportNode(payload: Payload<'node.observed'>): PushOutcome {
    return this.enqueue(outItem('node.observed', checkedPayload('node.observed', payload)));
  }

  removeNode(nodeId: string): PushOutcome {
    return this.enqueue(outItem('node.removed', checkedPayload('node.removed', { node_id: nodeId })));
  }

  reportDevice(payload: Payload<'device.observed'>): PushOutcome {
    return this.enqueue(outItem('device.observed', checkedPayload('device.observed', payload)));
  }

  removeDevice(deviceId: string): PushOutcome {
    return this.enqueue(outItem('device.removed', checkedPayload('device.removed', { device_id: deviceId })));
  }

  reportDeployment(payload: Payload<'deployment.observed'>): PushOutcome {
    return this.enqueue(outItem('deployment.observed', checkedPayload('deployment.observed', payload)));
  }

  removeDeployment(deploymentId: string): PushOutcome {
    return this.enqueue(outItem('deployment.removed', checkedPayload('deployment.removed', { deployment_id: deploymentId })));
  }

  /** Something that happened (`node.event` etc.). `occurred_at` defaults to now. */
  emitEvent(
    kind: 'node' | 'device' | 'deployment',
    event: Omit<Payload<'node.event'>, 'occurred_at'> & { occurred_at?: string },
  ): PushOutcome {
    const type = `${kind}.event` as const;
    const payload = { ...event, occurred_at: event.occurred_at ?? new Date(this.timers.now()).toISOString() };
    return this.enqueue(outItem(type, checkedPayload(type, payload)));
  }

  /**
   * Stream the complete observed state now (a periodic reconciliation snapshot is legitimate at
   * any time). While disconnected it runs once the next session opens.
   */
  resync(): void {
    if (this.link?.welcomed) void this.startResync('requested');
    else this.resyncAfterOpen = true;
  }

  // ---------------------------------------------------------------------------------------------
  // Durable state.
  // ---------------------------------------------------------------------------------------------

  private async loadRecord(): Promise<DurableRecord> {
    try {
      return (await this.opts.cursorStore.load()) ?? emptyRecord();
    } catch (err) {
      if (!(err instanceof CorruptCursorStoreError)) throw err;
      // Nothing can be resumed from an unreadable record; a fresh session is correct, only slower.
      const aside = this.opts.cursorStore instanceof FileCursorStore ? await this.opts.cursorStore.quarantine() : null;
      this.log.error('cursor store unreadable: starting as a new session', { err, moved_to: aside });
      return emptyRecord();
    }
  }

  /** Decide what can be resumed and whether to say `lossy` (see resume-base.ts). */
  private restore(record: DurableRecord): void {
    this.sessionId = record.sessionId;
    this.persistedCursor = record.cursor;
    this.inbound = new InboundSequencer(record.cursor);
    const base = decideResumeBase(record, this.buffer);
    if (base.keepBuffer) {
      this.buffer.releaseThrough(base.outbound.peerAck);
      if (base.problem) this.log.warn('outbound log recovered', { problem: base.problem });
    } else {
      if (base.lossy) this.log.warn('cannot prove the outbound buffer survived: hello will say lossy', { problem: base.problem });
      this.buffer.clear();
    }
    this.lossy = base.lossy;
    this.displacedSession = record.displacedSession ?? null;
    if (record.hubSnapshotOpen && record.sessionId !== null) {
      // The half-received snapshot is gone from memory: it can never be pruned against, and a
      // resume would only replay its tail. Ask for a fresh session, which brings a whole one.
      this.log.warn('restarted in the middle of a hub snapshot: hello will say lossy so a fresh snapshot follows', {
        session: record.sessionId,
      });
      this.lossy = true;
    }
    this.outbound = new OutboundSequencer(this.buffer, UNBOUNDED, base.outbound);
    this.resyncAfterOpen = base.resyncAfterOpen;
  }

  private buildRecord(clean: boolean): DurableRecord {
    return {
      version: 1,
      sessionId: this.sessionId,
      cursor: this.inbound.cursor,
      outbound: this.outbound.snapshot(),
      clean,
      operations: this.book ? this.book.snapshot() : [],
      hubSnapshotOpen: this.streams.size > 0,
      displacedSession: this.displacedSession,
    };
  }

  private markChanged(): void {
    this.changeVersion++;
  }

  private get needsSave(): boolean {
    return this.changeVersion !== this.savedVersion || this.inbound.cursor !== this.persistedCursor;
  }

  /**
   * Save the record; when the returned promise resolves, a record at least as new as the state
   * at the time of the call is durable. Saves are single-flight; callers during a save get the
   * next one.
   */
  private persist(): Promise<void> {
    if (this.persisting) {
      this.persistAgain = true;
      return this.persisting;
    }
    const run = async () => {
      try {
        do {
          this.persistAgain = false;
          const version = this.changeVersion;
          const record = this.buildRecord(this.cleanOnSave);
          await this.opts.cursorStore.save(record);
          this.savedVersion = version;
          this.persistedCursor = record.cursor;
        } while (this.persistAgain);
      } finally {
        this.persisting = null;
      }
    };
    this.persisting = run();
    return this.persisting;
  }

  // ---------------------------------------------------------------------------------------------
  // Connection lifecycle.
  // ---------------------------------------------------------------------------------------------

  private setState(s: ClientState): void {
    if (this.current === s) return;
    this.current = s;
    this.emit('state', s);
  }

  private get pingMs(): number {
    return this.opts.pingIntervalMs ?? this.limits.ping_interval_s * 1000;
  }

  private get idleMs(): number {
    return this.opts.idleTimeoutMs ?? this.limits.idle_timeout_s * 1000;
  }

  private connect(): void {
    if (this.stopping) return;
    this.nextReconnectAt = null;
    this.setState('connecting');
    // hello's resume_from must be durable, and so must anything the previous link left unsaved.
    if (this.needsSave) {
      this.persist().then(
        () => this.dialNow(),
        (err: unknown) => {
          this.log.error('could not save the cursor before connecting; retrying', { err });
          this.scheduleReconnect();
        },
      );
      return;
    }
    this.dialNow();
  }

  private dialNow(): void {
    if (this.stopping) return;
    const link: Link = {
      transport: null,
      gen: this.gen,
      welcomed: false,
      welcomedAt: 0,
      ended: false,
      closing: false,
      lastAckSent: 0,
      lastFrameAt: this.timers.now(),
      replay: null,
      connectionError: null,
      cancelPing: NOOP,
      cancelIdle: NOOP,
      cancelHandshake: NOOP,
    };
    this.link = link;
    this.counters.connects++;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.opts.token}`,
      'User-Agent': `wingsmith-operator/${this.opts.operatorVersion}`,
    };
    if (this.sessionId) headers['Wingsmith-Session'] = this.sessionId;
    this.armIdle(link);
    try {
      const transport = this.dial(
        { url: this.url, headers },
        {
          onOpen: () => this.onOpen(link),
          onMessage: (text, binary) => this.onMessage(link, text, binary),
          onClose: (code, reason, httpStatus, httpBody) => {
            if (httpStatus !== undefined && httpBody) link.connectionError = httpRefusalError(httpBody);
            this.onClosed(link, code, reason, httpStatus ?? null);
          },
        },
      );
      if (link.ended) transport.close(CloseCode.NORMAL, 'already closed');
      else link.transport = transport;
    } catch (err) {
      this.onClosed(link, 1006, `dial failed: ${err instanceof Error ? err.message : String(err)}`, null);
    }
  }

  private onOpen(link: Link): void {
    if (this.link !== link || link.ended) return;
    this.setState('handshaking');
    const resuming = this.sessionId !== null;
    const hello: Payload<'hello'> = {
      cluster_id: this.opts.clusterId,
      operator_version: this.opts.operatorVersion,
      session_id: this.sessionId,
      resume_from: resuming ? this.persistedCursor : null,
      lossy: resuming ? this.lossy : false,
    };
    this.log.info('connected; hello', { session: this.sessionId, resume_from: hello.resume_from, lossy: hello.lossy });
    this.write(link, buildFrame({ type: 'hello', payload: hello, now: this.timers.now() }));
    const handshakeMs = this.opts.handshakeTimeoutMs ?? 10_000;
    link.cancelHandshake = this.timers.schedule(() => {
      if (link.welcomed || link.ended) return;
      this.log.warn('no welcome within the handshake timeout: closing the link', { timeout_ms: handshakeMs });
      this.closeLink(link, CloseCode.TIMEOUT, `no welcome within ${handshakeMs} ms`);
    }, handshakeMs);
  }

  /** Close a link; everything else happens in `onClosed`, which every transport calls once. */
  private closeLink(link: Link, code: number, reason: string): void {
    if (link.closing || link.ended) return;
    link.closing = true;
    if (link.transport) link.transport.close(code, reason);
    // A transport that reports its close later must not leave the client waiting on it.
    this.onClosed(link, code, reason, null);
  }

  private onClosed(link: Link, code: number, reason: string, httpStatus: number | null): void {
    if (link.ended) return;
    link.ended = true;
    link.cancelPing();
    link.cancelIdle();
    link.cancelHandshake();
    if (this.link !== link) return;
    this.link = null;
    this.gen++;
    for (const cancel of this.retries) cancel();
    this.retries.clear();
    this.cancelAck?.();
    this.cancelAck = null;
    this.ackDue = false;
    const welcomed = link.welcomed;
    const error = link.connectionError;
    const refusal = this.stopping ? null : classifyClose({ closeCode: code, reason, httpStatus, welcomed, error });
    if (!refusal) this.log.info('link closed', { code, reason, http_status: httpStatus, welcomed, session: this.sessionId, error });
    this.safeEmit('closed', { code, reason, httpStatus, welcomed, error });
    if (this.stopping) {
      this.checkDrained();
      return;
    }
    if (welcomed && this.timers.now() - link.welcomedAt >= (this.opts.stableAfterMs ?? 10_000)) this.backoff.reset();
    if (!refusal) return this.scheduleReconnect();
    if (refusal.forgetSession && this.sessionId !== null) {
      // Resuming would take the cluster back from the operator that holds it now. The record
      // keeps the old id for diagnostics; the next hello asks for a new session.
      this.displacedSession = this.sessionId;
      this.sessionId = null;
      this.lossy = false;
      this.markChanged();
      // Now, not at the next dial: a process that dies during the wait must not resume it either.
      this.persist().catch((err: unknown) => this.log.error('could not save the record after a displacement', { err }));
    }
    const delay = refusal.waitCap ? this.backoff.refusal() : this.backoff.next();
    const line = refusalLogLine(refusal, delay);
    this.log.error(line.msg, { ...line.fields, session: this.sessionId, displaced_session: refusal.forgetSession ? this.displacedSession : undefined });
    this.safeEmit('refused', {
      kind: refusal.kind,
      closeCode: refusal.closeCode,
      code: refusal.closeCode,
      httpStatus: refusal.httpStatus,
      error: refusal.error,
      reason: refusal.reason,
      retryInMs: delay,
    });
    this.scheduleReconnect(delay);
  }

  /** Emit to the application; a listener that throws must not break the link's own work. */
  private safeEmit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: ClientEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      this.log.error(`a '${String(event)}' listener threw; ignored`, { err });
    }
  }

  private scheduleReconnect(delay = this.backoff.next()): void {
    if (this.stopping) return;
    this.setState('waiting');
    this.nextReconnectAt = this.timers.now() + delay;
    this.log.debug('reconnecting after backoff', { delay_ms: delay, attempt: this.backoff.attempt });
    this.cancelReconnect = this.timers.schedule(() => {
      this.cancelReconnect = NOOP;
      this.connect();
    }, delay);
  }

  private armIdle(link: Link): void {
    const check = () => {
      if (link.ended) return;
      const silent = this.timers.now() - link.lastFrameAt;
      if (silent >= this.idleMs) {
        this.log.warn('no frame from the hub within the idle limit: closing the link', { silent_ms: silent });
        this.closeLink(link, CloseCode.TIMEOUT, `no frame for ${Math.round(silent / 1000)} s`);
        return;
      }
      link.cancelIdle = this.timers.schedule(check, this.idleMs - silent);
    };
    link.cancelIdle();
    link.cancelIdle = this.timers.schedule(check, this.idleMs);
  }

  private armPing(link: Link): void {
    link.cancelPing = this.timers.schedule(() => {
      if (link.ended || this.link !== link) return;
      // Canonical: while the cursor does not move, every ping is the same text, which the hub's
      // runtime answers without waking the session object.
      this.write(link, canonicalPing(this.persistedCursor));
      link.lastAckSent = Math.max(link.lastAckSent, this.persistedCursor);
      this.armPing(link);
    }, this.pingMs);
  }

  private write(link: Link, text: string): void {
    if (!link.transport || link.ended) return;
    link.transport.send(text);
    this.counters.framesOut++;
  }

  private protocolError(link: Link, reason: string): void {
    this.log.warn('protocol error on the hub link: closing', { reason, session: this.sessionId });
    this.closeLink(link, CloseCode.PROTOCOL_ERROR, reason);
  }

  // ---------------------------------------------------------------------------------------------
  // Receive side.
  // ---------------------------------------------------------------------------------------------

  private onMessage(link: Link, text: string, binary: boolean): void {
    if (this.link !== link || link.ended || link.closing) return;
    this.counters.framesIn++;
    link.lastFrameAt = this.timers.now();
    if (binary) return this.protocolError(link, 'binary message: every frame is a JSON text message');
    const incoming = readFrame(text);
    if (incoming.kind === 'fatal') {
      this.log.error('undecodable frame from the hub', { reason: incoming.reason, id: incoming.id });
      return this.protocolError(link, incoming.reason);
    }
    const env = incoming.envelope;

    // The cursor rides on any readable envelope, sequenced or not.
    if (env.ack !== null && link.welcomed) {
      const outcome = this.outbound.acknowledge(env.ack);
      if (outcome === 'invalid') {
        return this.protocolError(link, `ack ${env.ack} is beyond the last frame sent (${this.outbound.lastSent})`);
      }
      if (outcome === 'advanced') {
        this.book.acknowledged(env.ack);
        this.requestPump();
        this.checkDrained();
      }
    }

    if (env.seq === null) return this.onUnsequenced(link, incoming);

    if (!link.welcomed) {
      // A hub that numbered its refusal anyway: there is no session to number it in, so it is
      // read as the connection-level error it stands for.
      if (incoming.kind === 'message' && incoming.message.type === 'error') {
        link.connectionError = this.onConnectionError(incoming.message.payload, env);
        return;
      }
      return this.protocolError(link, `sequenced ${env.type} before welcome`);
    }

    const arrival = this.inbound.arrive(env.seq);
    if (arrival === 'duplicate') {
      this.counters.duplicates++;
      this.log.debug('duplicate frame dropped', { seq: env.seq, type: env.type, expected: this.inbound.expected });
      return;
    }
    if (arrival === 'gap') {
      this.counters.gaps++;
      return this.protocolError(link, `gap: expected seq ${this.inbound.expected}, got ${env.seq}`);
    }
    const gen = this.gen;
    this.enqueueInbound(() => this.apply(gen, incoming, 0));
  }

  private onUnsequenced(link: Link, incoming: Exclude<Incoming, { kind: 'fatal' }>): void {
    const env = incoming.envelope;
    if (env.type === 'welcome') {
      if (link.welcomed) return this.protocolError(link, 'a second welcome');
      if (incoming.kind !== 'message' || incoming.message.type !== 'welcome') {
        return this.protocolError(link, `unreadable welcome: ${incoming.kind === 'poison' ? incoming.reason : 'unknown'}`);
      }
      return this.onWelcome(link, incoming.message.payload);
    }
    if (incoming.kind === 'poison') {
      this.log.warn('unreadable unsequenced frame from the hub ignored', { type: env.type, reason: incoming.reason });
      return;
    }
    if (incoming.kind === 'message' && incoming.message.type === 'error') {
      link.connectionError = this.onConnectionError(incoming.message.payload, env);
      return;
    }
    if (env.type === 'ping') {
      this.write(link, canonicalPong(this.persistedCursor));
      link.lastAckSent = Math.max(link.lastAckSent, this.persistedCursor);
    } else if (env.type === 'hello') {
      this.log.warn('the hub sent a hello; ignored');
    }
    // pong and ack: their whole content is the envelope's ack, handled already.
  }

  /**
   * A connection-level error (`seq: null`): the hub explains why it is about to close this link
   * (a refusal, a protocol error, displacement). It belongs to no stream: not acknowledged, never
   * fatal by itself. The close that follows decides what happens (onClosed).
   */
  private onConnectionError(payload: Payload<'error'>, env: Envelope): RefusalError {
    this.counters.hubErrors++;
    this.log.debug('connection-level error from the hub', { ...payload, reply_to: env.reply_to });
    this.safeEmit('hubError', { payload, replyTo: env.reply_to, seq: null });
    return { code: payload.code, message: payload.message, retryable: payload.retryable };
  }

  private onWelcome(link: Link, w: Payload<'welcome'>): void {
    const asked = this.sessionId;
    const fresh = w.full_resync || w.session_id !== asked;
    this.limits = w.limits;
    if (fresh) {
      const dropped = this.outbound.unacked;
      this.sessionGen++;
      this.outbound.reset();
      this.buffer.bindSession(w.session_id);
      this.inbound.reset();
      this.streams.clear();
      this.appliedRevision.clear();
      this.outbox.dropResync();
      this.resyncQueued = false;
      this.sessionId = w.session_id;
      this.lossy = false;
      // Nothing of the new session is processed yet: 0 is a true ack even before the save.
      this.persistedCursor = 0;
      this.markChanged();
      this.book.freshSession();
      this.counters.freshSessions++;
      this.log.info('fresh session', {
        session: w.session_id,
        asked: asked,
        full_resync: w.full_resync,
        dropped_unacked_frames: dropped,
      });
    } else {
      if (this.lossy) {
        // Resuming would pretend this operator can replay what it lost.
        return this.protocolError(link, 'the hub resumed a session this operator declared lossy');
      }
      const plan = this.outbound.planResume(w.ack_seq);
      if (!plan.ok) {
        this.lossy = true;
        this.log.error('cannot resume the session; next hello says lossy', { reason: plan.reason, ack_seq: w.ack_seq });
        return this.protocolError(link, `cannot resume from ${w.ack_seq}: ${plan.reason}`);
      }
      this.book.acknowledged(w.ack_seq);
      // The hub is about to replay from our cursor + 1: expect exactly that.
      this.inbound.rewind();
      link.replay = plan.replay;
      link.lastAckSent = this.persistedCursor;
      this.log.info('session resumed', { session: w.session_id, ack_seq: w.ack_seq, replaying: plan.replay.length });
    }
    link.welcomed = true;
    link.welcomedAt = this.timers.now();
    link.cancelHandshake();
    this.counters.sessionsOpened++;
    this.setState('open');
    this.armPing(link);
    this.linkStats.sessionOpened();
    this.enqueue(outItem('link.stats', this.linkStats.take(this.linkCounters(), this.timers.now())));
    if (fresh || this.resyncAfterOpen) {
      this.resyncAfterOpen = false;
      void this.startResync(fresh ? 'fresh session' : 'restart after an unclean stop');
    }
    this.safeEmit('welcome', { sessionId: w.session_id, fresh, hubVersion: w.hub_version, limits: w.limits, region: w.region ?? null });
    this.requestPump();
  }

  private enqueueInbound(task: () => Promise<void>): void {
    this.inboundPending++;
    this.inboundChain = this.inboundChain
      .then(task)
      .catch((err: unknown) => this.log.error('inbound processing failed', { err }))
      .finally(() => {
        this.inboundPending--;
        this.checkDrained();
      });
  }

  private dispatchHost(): DispatchHost {
    return {
      handlers: this.opts.handlers,
      book: this.book,
      streams: this.streams,
      appliedRevision: this.appliedRevision,
      logger: this.log.child({ session: this.sessionId }),
      counters: this.counters,
      send: (item) => this.enqueue(item),
      canReply: () => this.outbox.hasRoom(true),
      hubError: (payload, env: Envelope) => this.safeEmit('hubError', { payload, replyTo: env.reply_to, seq: env.seq }),
      pruned: (keep) => this.safeEmit('pruned', { keep }),
    };
  }

  private async apply(gen: number, incoming: Exclude<Incoming, { kind: 'fatal' }>, attempt: number): Promise<void> {
    // Frames read on a link that has since closed are not applied: the hub replays them.
    if (gen !== this.gen) return;
    const seq = incoming.envelope.seq as number;
    let result: Settled;
    try {
      result = await dispatch(this.dispatchHost(), incoming, attempt);
    } catch (err) {
      // A bug of ours: unsure means transient, so the frame is retried rather than lost.
      this.log.error('applying a frame failed unexpectedly; treated as transient', { err, seq, type: incoming.envelope.type });
      result = { settle: 'failed', reason: `internal error: ${err instanceof Error ? err.message : String(err)}`, cause: 'backpressure' };
    }
    if (gen !== this.gen) return;
    // Whether a hub snapshot is open is part of the durable record (restart safety).
    if (incoming.envelope.type === 'resync.begin' || incoming.envelope.type === 'stream.end') this.markChanged();
    if (result.settle === 'failed') {
      this.inbound.settle(seq, 'failed');
      this.counters.transientFailures++;
      if (result.cause === 'handler') this.scheduleStats();
      const delay = Math.min(this.retryPolicy.capMs, this.retryPolicy.baseMs * 2 ** Math.min(attempt, 30));
      this.log.warn('frame not applied (transient): ack withheld, retrying', {
        seq,
        type: incoming.envelope.type,
        reason: result.reason,
        cause: result.cause,
        attempt: attempt + 1,
        retry_in_ms: delay,
      });
      const cancel = this.timers.schedule(() => {
        this.retries.delete(cancel);
        this.enqueueInbound(() => this.apply(gen, incoming, attempt + 1));
      }, delay);
      this.retries.add(cancel);
      return;
    }
    if (this.inbound.settle(seq, result.settle)) this.cursorAdvanced();
  }

  private cursorAdvanced(): void {
    if (this.stopping) {
      // Draining: the hub must learn the final cursor now, not after a delay.
      this.ackDue = true;
      this.requestPump();
      return;
    }
    if (this.cancelAck) return;
    this.cancelAck = this.timers.schedule(() => {
      this.cancelAck = null;
      this.ackDue = true;
      this.requestPump();
    }, this.opts.ackDelayMs ?? 50);
  }

  // ---------------------------------------------------------------------------------------------
  // Send side.
  // ---------------------------------------------------------------------------------------------

  private enqueue(item: OutItem): PushOutcome {
    const evictedBefore = this.outbox.counters.evictedFrames;
    const outcome = this.outbox.push(item);
    if (outcome !== 'appended') this.scheduleStats();
    if (this.outbox.counters.evictedFrames > evictedBefore) this.scheduleReobserve();
    if (outcome === 'rejected') this.log.error('send queue refused a frame', { type: item.type });
    this.requestPump();
    return outcome;
  }

  private linkCounters(): LinkCounters {
    return { ...this.outbox.counters, handlerFailures: this.counters.handlerFailures };
  }

  private scheduleStats(): void {
    if (this.cancelStats) return;
    const due = this.linkStats.dueIn(this.linkCounters(), this.timers.now());
    if (due === null) return;
    this.cancelStats = this.timers.schedule(() => {
      this.cancelStats = null;
      // Between sessions the next welcome sends a fresh report anyway.
      if (!this.link?.welcomed) return;
      this.enqueue(outItem('link.stats', this.linkStats.take(this.linkCounters(), this.timers.now())));
    }, due);
  }

  /**
   * A state frame was evicted (or refused) by the full queue: its statement is gone, and unless
   * the application happens to report that subject again the hub would keep the stale row
   * until the next periodic resync. The spec allows the eviction because "the sender will
   * observe the state again"; the SDK is the sender, so it does: a snapshot once the burst has
   * had a moment to pass (at most one per `reobserveDelayMs`; a resync already streaming queues
   * the next one behind it).
   */
  private scheduleReobserve(): void {
    if (this.cancelReobserve || this.stopping) return;
    this.cancelReobserve = this.timers.schedule(() => {
      this.cancelReobserve = null;
      if (this.stopping) return;
      this.log.warn('state frames were evicted under backpressure: streaming an observed snapshot so the hub observes them again', {
        evicted_frames: this.outbox.counters.evictedFrames,
      });
      this.resync();
    }, this.opts.reobserveDelayMs ?? 1_000);
  }

  private async startResync(reason: string): Promise<void> {
    if (this.outbox.resyncInProgress) {
      // Superseding a stream midway would leave the hub a begin without an end: run after it.
      this.resyncQueued = true;
      return;
    }
    const sessionGen = this.sessionGen;
    let snapshot: ObservedSnapshot;
    try {
      snapshot = await this.opts.snapshot();
    } catch (err) {
      this.log.error('taking the observed snapshot failed; resync retried after the next welcome', { err, reason });
      this.resyncAfterOpen = true;
      return;
    }
    if (sessionGen !== this.sessionGen || this.stopping) return;
    const stream = new ObservedResync(snapshot, () => newId(this.timers.now()));
    if (stream.problems.length > 0) {
      this.log.error('observed snapshot has invalid objects: the stream will be marked incomplete', {
        problems: stream.problems.slice(0, 10),
      });
    }
    this.log.info('streaming observed resync', { reason, begin: stream.beginId, scope: stream.scope });
    this.counters.resyncsSent++;
    this.outbox.startResync(stream);
    this.requestPump();
  }

  /** Coalesce a burst of requests into one write batch (one fsync, one save). */
  private requestPump(): void {
    this.pumpRequested = true;
    if (this.pumping || this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      void this.pumpLoop();
    });
  }

  private async pumpLoop(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.pumpRequested) {
        this.pumpRequested = false;
        await this.pumpOnce();
      }
    } catch (err) {
      this.log.error('writer failed', { err });
    } finally {
      this.pumping = false;
      this.checkDrained();
    }
  }

  private windowOpen(): boolean {
    return this.outbound.unacked < this.limits.replay_buffer_frames && this.outbound.store.bytes < this.limits.replay_buffer_bytes;
  }

  /**
   * One write batch: number what the window allows, make the batch and the cursor durable
   * (one fsync of the log, one save of the record, in parallel), then write it all.
   */
  private async pumpOnce(): Promise<void> {
    const link = this.link;
    if (!link || !link.welcomed || link.closing || link.ended) return;
    const texts: string[] = [];
    const written: { item: OutItem; seq: number }[] = [];
    if (link.replay) {
      for (const e of link.replay) texts.push(e.frame);
      link.replay = null;
    }
    const ack = this.inbound.cursor;
    while (this.windowOpen()) {
      const item = this.outbox.next();
      if (!item) break;
      const seq = this.outbound.nextSeq;
      const text = buildFrame({
        type: item.type,
        payload: item.payload as never,
        seq,
        ack,
        reply_to: item.replyTo,
        ...(item.id !== undefined ? { id: item.id } : {}),
        now: this.timers.now(),
      });
      const bytes = utf8Length(text);
      if (bytes > this.limits.max_frame_bytes) {
        this.counters.oversizeFrames++;
        this.log.error('frame larger than the hub accepts: not sent', { type: item.type, bytes, max: this.limits.max_frame_bytes });
        this.outbox.skipped(item, `frame of ${bytes} bytes exceeds max_frame_bytes`);
        continue;
      }
      if (this.outbound.unacked > 0 && this.outbound.store.bytes + bytes > this.limits.replay_buffer_bytes) {
        this.outbox.putBack(item);
        break;
      }
      this.outbound.stamp(() => text);
      this.outbox.wrote(item);
      texts.push(text);
      written.push({ item, seq });
    }

    try {
      await Promise.all([this.needsSave ? this.persist() : undefined, texts.length > 0 ? this.buffer.sync() : undefined]);
    } catch (err) {
      // Nothing of this batch reached the socket. A log that failed to sync cannot vouch for
      // itself any more, so the next hello says lossy.
      this.log.error('could not make the batch durable: nothing written, reconnecting', { err });
      if (written.length > 0) this.lossy = true;
      if (this.link === link) this.closeLink(link, CloseCode.INTERNAL, 'local storage failure');
      return;
    }
    if (this.link !== link || link.closing || link.ended) return; // Numbered frames wait in the buffer for the resume.

    for (const t of texts) this.write(link, t);
    // Control frames went out: conclusions that waited for room in the queue may follow.
    if (this.book.hasDeferred) this.book.resumeDeferred();
    for (const w of written) {
      w.item.onWritten?.(w.seq);
      if (w.item.type === 'stream.end') {
        this.log.info('observed resync written', { seq: w.seq, ...(w.item.payload as object) });
        if (this.resyncQueued && !this.outbox.resyncInProgress) {
          this.resyncQueued = false;
          void this.startResync('requested during the previous resync');
        }
      }
    }
    if (written.length > 0) link.lastAckSent = Math.max(link.lastAckSent, ack);
    if (this.ackDue) {
      this.ackDue = false;
      if (this.persistedCursor > link.lastAckSent) {
        this.write(link, buildFrame({ type: 'ack', payload: {}, ack: this.persistedCursor, now: this.timers.now() }));
        link.lastAckSent = this.persistedCursor;
      }
    }
    if (this.inbound.cursor > link.lastAckSent) this.cursorAdvanced();
    if (written.length > 0 && !this.outbox.empty && this.windowOpen()) this.pumpRequested = true;
  }

  // ---------------------------------------------------------------------------------------------
  // Stop.
  // ---------------------------------------------------------------------------------------------

  private get drained(): boolean {
    const link = this.link;
    if (!link || !link.welcomed || link.ended) return true; // Nothing more can drain without a link.
    return (
      this.outbox.empty &&
      this.outbound.unacked === 0 &&
      this.inboundPending === 0 &&
      this.book.runningCount === 0 &&
      link.lastAckSent >= this.inbound.cursor
    );
  }

  private checkDrained(): void {
    if (!this.stopping || this.drainWaiters.length === 0 || !this.drained) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }

  private async stopNow(graceful: boolean, timeoutMs: number): Promise<void> {
    this.stopping = true;
    if (this.starting) await this.starting.catch(() => {});
    if (!this.starting || !this.book) {
      // Never started (or failed to load): nothing to drain or persist.
      this.setState('stopped');
      this.emit('stopped');
      return;
    }
    this.setState('stopping');
    this.cancelReconnect();
    this.cancelReconnect = NOOP;
    if (graceful && this.book) {
      this.book.abortAll('the operator is stopping');
      let cancelTimeout = NOOP;
      await new Promise<void>((resolve) => {
        cancelTimeout = this.timers.schedule(resolve, timeoutMs);
        this.drainWaiters.push(resolve);
        // Acks go out at once from here on.
        if (this.inbound.cursor > (this.link?.lastAckSent ?? 0)) {
          this.cancelAck?.();
          this.cancelAck = null;
          this.cursorAdvanced();
        }
        this.requestPump();
        this.checkDrained();
      });
      cancelTimeout();
    }
    const clean =
      graceful &&
      this.outbox.empty &&
      this.outbound.unacked === 0 &&
      this.inboundPending === 0 &&
      (this.book?.runningCount ?? 0) === 0;
    this.cancelAck?.();
    this.cancelStats?.();
    this.cancelReobserve?.();
    this.cancelReobserve = null;
    for (const cancel of this.retries) cancel();
    this.retries.clear();
    this.book?.dispose();
    try {
      this.cleanOnSave = clean;
      this.markChanged();
      await this.persist();
    } catch (err) {
      this.log.error('could not save the cursor on stop', { err });
    }
    if (this.link) this.closeLink(this.link, graceful ? CloseCode.NORMAL : 1001, 'operator stopping');
    try {
      await this.buffer.close();
    } catch (err) {
      this.log.error('could not close the outbound log', { err });
    }
    this.log.info('operator stopped', { graceful, clean, unacked: this.outbound?.unacked ?? 0, queued: this.outbox.length });
    this.setState('stopped');
    this.emit('stopped');
  }

  private operationHost() {
    return {
      send: (item: OutItem) => this.enqueue(item),
      hasRoom: () => this.outbox.hasRoom(),
      changed: () => {
        this.markChanged();
        this.requestPump();
        this.checkDrained();
      },
      timers: this.timers,
      logger: this.log,
    };
  }
}
