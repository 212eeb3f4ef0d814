/**
 * The connection lifecycle: dial (after the record is durable, so `hello.resume_from` is), say
 * `hello`, watch the link's silence and handshake deadline, and on every close decide with the
 * refusal policy (refusal.ts) when to dial again: the ordinary backoff, or a draw under the whole
 * cap after a refusal, forgetting the session after a displacement. Reconnects forever.
 */
import { buildFrame, CloseCode, cutText } from '../protocol';
import type { Backoff } from './backoff';
import type { ClientEvents, ClientState, ClientStats, OperatorClientOptions } from './client-types';
import type { RecordKeeper } from './durable';
import { dialHeaders, helloFor } from './handshake';
import { Link } from './link';
import type { Logger } from './logger';
import { afterRetryAfter, classifyClose, httpRefusalError, refusalLogLine, retryAfterMs } from './refusal';
import type { SessionState } from './session';
import { elapsed, type Timers } from './timers';
import type { Dialer } from './transport';

const NOOP = () => {};
/** Protocol-error closes in a row, each soon after a welcome, before the session is given up as lossy. */
export const QUICK_PROTOCOL_ERRORS = 3;

export interface ConnectionHost {
  readonly opts: Pick<
    OperatorClientOptions,
    'token' | 'clusterId' | 'operatorVersion' | 'idleTimeoutMs' | 'handshakeTimeoutMs' | 'ackTimeoutMs' | 'stableAfterMs'
  >;
  readonly url: string;
  readonly timers: Timers;
  readonly log: Logger;
  readonly counters: ClientStats;
  readonly dial: Dialer;
  readonly backoff: Backoff;
  readonly session: SessionState;
  readonly record: RecordKeeper;
  stopping(): boolean;
  setState(s: ClientState): void;
  /** Emit to the application (a throwing listener is logged, never fatal). */
  emit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void;
  onMessage(link: Link, text: string, binary: boolean): void;
  /** The current link closed: what belonged to it stops (retries, a pending ack). */
  linkClosed(): void;
}

export class Connection {
  /** The current link (null between links). */
  link: Link | null = null;
  /** On the monotonic clock (`elapsed`): the wait is a duration. */
  private nextReconnectAt: number | null = null;
  private cancelReconnect: () => void = NOOP;
  /** Links of one session closed 4400 soon after their welcome, in a row (`noteQuickProtocolErrors`). */
  private quickProtocolErrors = { session: null as string | null, count: 0 };

  constructor(private readonly host: ConnectionHost) {}

  get nextReconnectInMs(): number | null {
    return this.nextReconnectAt === null ? null : Math.max(0, this.nextReconnectAt - elapsed(this.host.timers));
  }

  connect(): void {
    const h = this.host;
    if (h.stopping()) return;
    this.nextReconnectAt = null;
    h.setState('connecting');
    // hello's resume_from must be durable, and so must anything the previous link left unsaved.
    if (!h.record.needsSave(h.session.ackableCursor())) return this.dialNow();
    h.record.persist().then(
      () => this.dialNow(),
      (err: unknown) => {
        h.log.error('could not save the cursor before connecting; retrying', { err });
        this.scheduleReconnect(h.backoff.next());
      },
    );
  }

  /** The client is stopping: no more dials. */
  stop(): void {
    this.cancelReconnect();
    this.cancelReconnect = NOOP;
  }

  write(link: Link, text: string): void {
    if (link.write(text)) this.host.counters.framesOut++;
  }

  /** A ping or pong: it carries the durable cursor, which counts as acked on this link. */
  writeCursor(link: Link, text: string): void {
    this.write(link, text);
    link.lastAckSent = Math.max(link.lastAckSent, this.host.record.persistedCursor);
  }

  /**
   * Close 4400 after a connection-level error frame naming the reason (MESSAGES.md: a fatal
   * envelope, a gap, an impossible ack "close the connection with 4400 after an error frame").
   * `replyTo`: the offending frame's id when it is a ULID.
   */
  protocolError(link: Link, reason: string, replyTo: string | null = null): void {
    this.host.log.warn('protocol error on the hub link: closing', { reason, reply_to: replyTo, session: this.host.session.id });
    if (!link.closing && !link.ended) {
      this.write(
        link,
        buildFrame({ type: 'error', payload: { code: 'invalid', message: cutText(reason, 2048), retryable: false }, reply_to: replyTo, now: this.host.timers.now() }),
      );
    }
    this.close(link, CloseCode.PROTOCOL_ERROR, reason);
  }

  /** Close a link; everything else happens in `onClosed`, which every transport calls once. */
  close(link: Link, code: number, reason: string): void {
    if (link.closing || link.ended) return;
    link.closing = true;
    link.transport?.close(code, reason);
    // A transport that reports its close later must not leave the client waiting on it.
    this.onClosed(link, code, reason, null);
  }

  private dialNow(): void {
    const h = this.host;
    if (h.stopping()) return;
    const link = (this.link = new Link(h.timers));
    h.counters.connects++;
    const idleMs = () => h.opts.idleTimeoutMs ?? h.session.limits.idle_timeout_s * 1000;
    // Until the welcome the handshake deadline is the rule (the spec gives a handshake 10 s, and
    // the hub applies its silence rule only to an open session): a hub is silent while it
    // answers the hello, and a previous welcome's short idle limit would cut every hello that
    // takes longer. The silence watch still bounds a dial that never opens.
    const handshakeMs = h.opts.handshakeTimeoutMs ?? 10_000;
    link.watchSilence(() => (link.welcomed ? idleMs() : Math.max(idleMs(), handshakeMs)), (silentMs) => {
      h.log.warn('no frame from the hub within the idle limit: closing the link', { silent_ms: silentMs });
      this.close(link, CloseCode.TIMEOUT, `no frame for ${Math.round(silentMs / 1000)} s`);
    });
    link.watchAckWait(
      () => h.opts.ackTimeoutMs ?? 2 * idleMs(),
      (waitedMs) => {
        h.log.warn('the hub has not acknowledged sent frames within the ack limit: closing the link to resume and replay them', {
          waited_ms: waitedMs,
          session: h.session.id,
          unacked: h.session.outbound.unacked,
        });
        this.close(link, CloseCode.TIMEOUT, `no ack for ${Math.round(waitedMs / 1000)} s`);
      },
    );
    try {
      const headers = dialHeaders(h.opts.token, { operatorVersion: h.opts.operatorVersion, sessionId: h.session.id });
      const transport = h.dial(
        { url: h.url, headers },
        {
          onOpen: () => this.onOpen(link),
          onMessage: (text, binary) => h.onMessage(link, text, binary),
          onClose: (code, reason, httpStatus, httpBody, retryAfter) => {
            if (httpStatus !== undefined && httpBody) link.connectionError = httpRefusalError(httpBody, httpStatus);
            this.onClosed(link, code, reason, httpStatus ?? null, retryAfterMs(retryAfter, h.timers.now()));
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
    const h = this.host;
    if (this.link !== link || link.ended) return;
    // A hello claims the cluster (the newest wins): a process that is stopping must not take it
    // from its successor with a dial that was in flight when the stop began.
    if (h.stopping()) return this.close(link, CloseCode.NORMAL, 'operator stopping');
    h.setState('handshaking');
    // The upgrade's answer is the hub's first word: the handshake deadline runs from here, and so
    // does the silence, so a slow dial does not eat into the time the hub has for the hello.
    link.heard();
    const s = h.session;
    const { clusterId, operatorVersion } = h.opts;
    const hello = helloFor({ clusterId, operatorVersion, sessionId: s.id, durableCursor: h.record.persistedCursor, lossy: s.lossy });
    h.log.info('connected; hello', { session: s.id, resume_from: hello.resume_from, lossy: hello.lossy });
    this.write(link, buildFrame({ type: 'hello', payload: hello, now: h.timers.now() }));
    const ms = h.opts.handshakeTimeoutMs ?? 10_000;
    link.expectWelcome(ms, () => {
      h.log.warn('no welcome within the handshake timeout: closing the link', { timeout_ms: ms });
      this.close(link, CloseCode.TIMEOUT, `no welcome within ${ms} ms`);
    });
  }

  private onClosed(link: Link, code: number, reason: string, httpStatus: number | null, retryAfter: number | null = null): void {
    const h = this.host;
    if (!link.end() || this.link !== link) return;
    this.link = null;
    h.linkClosed();
    const { welcomed, connectionError: error } = link;
    if (welcomed && code === CloseCode.TOO_BIG && !h.session.lossy && h.session.id !== null) {
      // The hub refused a frame of ours as too big. It is in the replay buffer, and a resume would
      // replay it verbatim and be closed the same way, forever: only a fresh session gets past it.
      // (The same code from our own socket, over a hub frame past `maxPayload`, costs a resync too.)
      h.session.lossy = true;
      h.log.error('the link was closed 1009 (a frame over the size limit): the next hello says lossy, for a fresh session', {
        session: h.session.id,
        reason,
      });
      // Saved at once: a process stopped or crashed before the next hello must say lossy too.
      h.record.markChanged();
      h.record.persist().catch((err: unknown) => h.log.error('could not save the lossy verdict', { err }));
    }
    this.noteQuickProtocolErrors(link, code, welcomed, reason);
    const refusal = classifyClose({ closeCode: code, reason, httpStatus, welcomed, error });
    if (!refusal) h.log.info('link closed', { code, reason, http_status: httpStatus, welcomed, session: h.session.id, error });
    h.emit('closed', { code, reason, httpStatus, welcomed, error });
    if (refusal?.forgetSession && h.session.id !== null) {
      // Resuming would take the cluster back from the operator that holds it now. The record
      // keeps the old id for diagnostics; the next hello asks for a new session. Saved now, not
      // at the next dial: a process that dies during the wait must not resume it either. Also
      // while stopping: a displacement during a rolling restart's drain is when the next process
      // would otherwise resume it.
      h.session.forget();
      h.record.markChanged();
      h.record.persist().catch((err: unknown) => h.log.error('could not save the record after a displacement', { err }));
    }
    // A refusal while stopping is no less the hub's word (a cluster disabled, a token rotated):
    // it needs a person whichever process comes next, so it is told the same way, with no next
    // attempt; the stop goes on and resolves.
    let delay: number | null = null;
    if (!h.stopping()) {
      if (welcomed && link.clock() - link.welcomedAt >= (h.opts.stableAfterMs ?? 10_000)) h.backoff.reset();
      // A hub that said when to come back (Retry-After, with a 503 or 429 at the upgrade) is not
      // asked sooner, within the backoff's cap (refusal.ts).
      const capMs = h.backoff.policy.capMs;
      if (!refusal) return this.scheduleReconnect(afterRetryAfter(h.backoff.next(), retryAfter, capMs));
      delay = afterRetryAfter(refusal.waitCap ? h.backoff.refusal() : h.backoff.next(), retryAfter, capMs);
    }
    if (!refusal) return;
    const line = refusalLogLine(refusal, delay);
    const displaced = refusal.forgetSession ? h.session.displaced : undefined;
    h.log[line.level](line.msg, { ...line.fields, session: h.session.id, displaced_session: displaced });
    h.emit('refused', { kind: refusal.kind, closeCode: code, code, httpStatus, error: refusal.error, reason, retryInMs: delay });
    if (delay !== null) this.scheduleReconnect(delay);
  }

  /**
   * A session closed as a protocol error soon after its welcome, resume after resume: what one
   * side refuses is in what the other's resume replays (a frame the hub reads as a gap; a hub
   * frame this operator reads as one, or cannot read), and each replay is verbatim, so resuming
   * again is closed the same way, forever ("a resume never wedges"). After QUICK_PROTOCOL_ERRORS
   * in a row the next hello says lossy: a fresh session restarts both streams and drops both
   * replays (a full resync, slower, never wrong). A link that stayed up past `stableAfterMs`
   * starts the count again, and so does another session.
   */
  private noteQuickProtocolErrors(link: Link, code: number, welcomed: boolean, reason: string): void {
    const h = this.host;
    if (!welcomed) return;
    const quick = link.clock() - link.welcomedAt < (h.opts.stableAfterMs ?? 10_000);
    const q = this.quickProtocolErrors;
    if (code !== CloseCode.PROTOCOL_ERROR || !quick || h.session.id === null || h.session.lossy) {
      if (!quick) q.count = 0;
      return;
    }
    // Another session's closes (before a fresh one) say nothing of this one's replay.
    if (q.session !== h.session.id) Object.assign(q, { session: h.session.id, count: 0 });
    if (++q.count < QUICK_PROTOCOL_ERRORS) return;
    q.count = 0;
    h.session.lossy = true;
    h.log.error(`the session was closed as a protocol error ${QUICK_PROTOCOL_ERRORS} times in a row soon after its welcome (by the hub, or by this operator over a hub frame): the next hello says lossy, for a fresh session`, {
      session: h.session.id,
      reason,
    });
    h.record.markChanged();
    h.record.persist().catch((err: unknown) => h.log.error('could not save the lossy verdict', { err }));
  }

  private scheduleReconnect(delay: number): void {
    const h = this.host;
    if (h.stopping()) return;
    h.setState('waiting');
    this.nextReconnectAt = elapsed(h.timers) + delay;
    h.log.debug('reconnecting after backoff', { delay_ms: delay, attempt: h.backoff.attempt });
    this.cancelReconnect = h.timers.schedule(() => {
      this.cancelReconnect = NOOP;
      this.connect();
    }, delay);
  }
}
