import { buildFrame, canonicalPing, canonicalPong, CloseCode, closeReason, cutText, LIMITS, type ErrorCode } from '../../protocol';
import { describeError } from '../db/errors';
import type { LogFields, Logger } from '../log';
import { storableText } from '../storable-text';

/** Closes that lose the peer's work, or mean it misbehaves or stalls: logged at warn. */
const WARN_CLOSES: ReadonlySet<number> = new Set([CloseCode.TOO_BIG, CloseCode.TIMEOUT, CloseCode.SEND_QUEUE_FULL, CloseCode.INTERNAL]);
/** A close reason can quote the peer (a frame's reason): the log line quotes this much of it. */
const CLOSE_REASON_LOG_CHARS = 512;

/** What the object keeps with each WebSocket; it survives hibernation with the socket. */
export interface Attachment {
  cid: string;
  phase: 'handshake' | 'open';
  acceptedAt: number;
  clusterUid: string;
  clusterName: string;
  tokenHash: string;
  routeKey: string;
  remoteAddr: string | null;
  sessionId: string | null;
  /** The connection ended here (closed by either side): kept with the socket, so a wake knows it too. */
  ended?: true;
}

export interface SocketHooks {
  /** The session this object carries, if any: its connection is the active one. */
  sessionId(): string | undefined;
  /** The cursor a connection-level error carries (null before any session). */
  ack(): number | null;
  log(): Logger;
  /**
   * A connection ended (closed by either side, or errored); `active` when it carried the session.
   * `fields` name the connection, and the close code and reason when there was a close.
   */
  gone(ws: WebSocket, why: string, active: boolean, fields: LogFields): void;
}

/**
 * The object's WebSockets and how it speaks on them: attachments, which connection carries the
 * session, sending, the typed error before a close, closing, and the runtime's auto-answered
 * ping. Everything here is about sockets; what a frame means is the session's business.
 */
export class Sockets {
  private readonly attachments = new WeakMap<WebSocket, Attachment>();
  /** Connections that ended (closed here or by the peer): a frame still arriving from one is not acted on. */
  private readonly endedSockets = new WeakSet<WebSocket>();
  /** The connection carrying the session (null: none; undefined: not looked up since a wake). */
  private current: WebSocket | null | undefined = undefined;
  /** The installed auto-response as `lastSent/cursor` (null: none; undefined: unknown since construction). */
  private autoPong: string | null | undefined = undefined;
  private handshaking: boolean | undefined = undefined;
  /** When the hub's close went out on a connection (memory only: after a wake, when first seen closing). */
  private readonly closingAt = new WeakMap<WebSocket, number>();

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly hooks: SocketHooks,
  ) {}

  accept(server: WebSocket, att: Attachment): void {
    this.ctx.acceptWebSocket(server);
    this.setAttachment(server, att);
    this.handshaking = true;
  }

  /**
   * A connection is open and has not finished its handshake. The runtime's auto-answer is set per
   * object, not per connection: while one is installed it would answer such a connection's ping
   * with the session's pong, where the spec wants hello first and anything else refused (4400).
   * Cached, recomputed after any connection changes phase or ends.
   */
  anyHandshaking(): boolean {
    this.handshaking ??= this.all().some((ws) => ws.readyState === WebSocket.OPEN && !this.ended(ws) && this.attachment(ws)?.phase === 'handshake');
    return this.handshaking;
  }

  all(): WebSocket[] {
    return this.ctx.getWebSockets();
  }

  anyOpen(): boolean {
    return this.all().some((w) => w.readyState === WebSocket.OPEN);
  }

  attachment(ws: WebSocket): Attachment | null {
    let att = this.attachments.get(ws);
    if (!att) {
      att = (ws.deserializeAttachment() as Attachment | null) ?? undefined;
      if (att) this.attachments.set(ws, att);
    }
    return att ?? null;
  }

  setAttachment(ws: WebSocket, att: Attachment): void {
    ws.serializeAttachment(att);
    this.attachments.set(ws, att);
  }

  /** The open connection that carries the session, or null. */
  active(): WebSocket | null {
    if (this.current !== undefined) {
      if (this.current && this.current.readyState !== WebSocket.OPEN) this.current = null;
      return this.current;
    }
    // After a wake from hibernation: find the connection that carries the session.
    this.current = null;
    const sid = this.hooks.sessionId();
    for (const ws of this.all()) {
      const att = this.attachment(ws);
      if (att?.phase === 'open' && att.sessionId === sid && ws.readyState === WebSocket.OPEN) this.current = ws;
    }
    return this.current;
  }

  /** This connection now carries the session. */
  activate(ws: WebSocket, att: Attachment, sessionId: string): void {
    att.phase = 'open';
    att.sessionId = sessionId;
    this.setAttachment(ws, att);
    this.current = ws;
    this.handshaking = undefined;
  }

  /** Every other connection that carried (or tried to carry) the session. */
  others(ws: WebSocket): WebSocket[] {
    return this.all().filter((o) => o !== ws && this.attachment(o)?.phase === 'open');
  }

  send(ws: WebSocket, frame: string): void {
    try {
      ws.send(frame);
    } catch (err) {
      this.hooks.log().debug('send on a closed socket', { error: describeError(err) });
    }
  }

  /** A connection-level error: no seq, never replayed; it explains the close that follows. */
  sendError(ws: WebSocket, replyTo: string | null, code: ErrorCode, message: string, retryable: boolean): void {
    // Within the catalog's bound, whatever the message quotes: past it the operator reads the
    // explanation of the close as a poison frame and drops it.
    const text = cutText(message, LIMITS.message);
    this.send(ws, buildFrame({ type: 'error', payload: { code, message: text, retryable }, reply_to: replyTo, ack: this.hooks.ack() }));
  }

  /** A typed error, then the close; this line is the close's line. */
  refuse(ws: WebSocket, close: number, replyTo: string | null, code: ErrorCode, message: string, retryable = false): void {
    this.hooks.log().warn('connection refused', { ...this.whose(ws), close, reason: storableText(message, CLOSE_REASON_LOG_CHARS) });
    this.sendError(ws, replyTo, code, message, retryable);
    this.close(ws, close, message, 'logged');
  }

  protocolError(ws: WebSocket, replyTo: string | null, message: string): void {
    this.hooks.log().warn('protocol error; closing 4400', { ...this.whose(ws), close: CloseCode.PROTOCOL_ERROR, reason: storableText(message, CLOSE_REASON_LOG_CHARS) });
    this.sendError(ws, replyTo, 'invalid', message, false);
    this.close(ws, CloseCode.PROTOCOL_ERROR, message, 'logged');
  }

  /**
   * Which cluster, session and connection a line is about. Before a hello opens the session the
   * object's logger names no cluster, and a refusal at the handshake is exactly the line someone
   * looks for.
   */
  whose(ws: WebSocket): { cluster?: string; session?: string; connection?: string } {
    const att = this.attachment(ws);
    if (!att) return {};
    return att.sessionId ? { cluster: att.clusterUid, session: att.sessionId, connection: att.cid } : { cluster: att.clusterUid, connection: att.cid };
  }

  /**
   * Close a connection from the hub's side. Every close the hub initiates leaves one line naming
   * the cluster, session (once known), connection, close code and reason: here, unless the caller
   * already wrote such a line (`'logged'`: a refusal, a protocol error). A close that loses the
   * peer's work or means it misbehaves or stalls (1009, 4408, 4429, 1011) is a warning; the others
   * (a superseded connection) are info. `fields` add what the caller knows of why (the queue's
   * depth), so the close's one line carries it.
   */
  close(ws: WebSocket, code: number, reason: string, line: 'log' | 'logged' = 'log', fields: LogFields = {}): void {
    // A connection already ended (closed by the peer meanwhile) is not closed by us: no line.
    if (line === 'log' && !this.endedSockets.has(ws)) {
      const level = WARN_CLOSES.has(code) ? 'warn' : 'info';
      this.hooks.log()[level]('hub closed the connection', { ...fields, ...this.whose(ws), close: code, reason: storableText(reason, CLOSE_REASON_LOG_CHARS) });
    }
    if (!this.closingAt.has(ws)) this.closingAt.set(ws, Date.now());
    try {
      ws.close(code, closeReason(reason));
    } catch {
      // Already closed, or a reason the socket refused: a socket still open must close anyway,
      // or it stays open with nothing watching it (forgotten below, no silence deadline).
      try {
        if (ws.readyState === WebSocket.OPEN) ws.close(code);
      } catch {
        // already closed
      }
    }
    this.forget(ws, `closed by hub (${code}: ${reason})`, { code, reason });
  }

  /**
   * Since when the oldest connection still CLOSING (the hub's close sent, the peer's answer not
   * yet in) has waited, or null. One found closing with no time of its own (the object was
   * evicted since) counts from now.
   */
  closingSince(now = Date.now()): number | null {
    let since: number | null = null;
    for (const ws of this.all()) {
      if (ws.readyState !== WebSocket.CLOSING) continue;
      let at = this.closingAt.get(ws);
      if (at === undefined) this.closingAt.set(ws, (at = now));
      since = since === null ? at : Math.min(since, at);
    }
    return since;
  }

  /** `ws` ended, by our own record rather than the runtime's readyState (see dispatch); across wakes too. */
  ended(ws: WebSocket): boolean {
    return this.endedSockets.has(ws) || this.attachment(ws)?.ended === true;
  }

  closeActive(code: number, reason: string, line: 'log' | 'logged' = 'log', fields: LogFields = {}): void {
    const ws = this.active();
    if (ws) this.close(ws, code, reason, line, fields);
  }

  /**
   * After a wake, whether `ws`, which is closing, carried the session. Not by `active()`: a
   * closing socket is no longer OPEN, so the close that ends an evicted session's connection (an
   * idle operator's, whose pings the runtime answered) would never count as its end. By its
   * attachment instead, unless another open connection carries the session (a superseded one's
   * late close must not end the live one).
   */
  private carriedSession(ws: WebSocket): boolean {
    const att = this.attachment(ws);
    return att?.phase === 'open' && att.sessionId === this.hooks.sessionId() && this.active() === null;
  }

  /**
   * The connection ended (or is ending): stop tracking it and tell the session. `close`: the code
   * and reason it closed with (none for a socket error), as fields of their own so that a query
   * need not parse `why`.
   */
  forget(ws: WebSocket, why: string, close?: { code: number; reason: string }): void {
    this.endedSockets.add(ws);
    this.handshaking = undefined;
    const wasActive = this.current === ws || (this.current === undefined && this.carriedSession(ws));
    // Read before the attachment is dropped: it is what names the connection.
    const att = this.attachment(ws);
    const cid = att?.cid;
    // Marked ended where a wake finds it too: a peer that ignores the close may send a hello
    // after the object hibernated, which would otherwise be taken for this socket's first frame.
    if (att && !att.ended) {
      try {
        ws.serializeAttachment({ ...att, ended: true });
      } catch {
        // A socket the runtime has already let go of carries nothing further anyway.
      }
    }
    this.attachments.delete(ws);
    if (wasActive) this.current = null;
    const fields: LogFields = cid ? { connection: cid } : {};
    if (close) Object.assign(fields, { close: close.code, reason: storableText(close.reason, CLOSE_REASON_LOG_CHARS) });
    this.hooks.gone(ws, why, wasActive, fields);
  }

  /** The last sign of life on a connection: its last frame, or a ping the runtime answered. */
  lastSeen(ws: WebSocket, lastFrameAt: number): number {
    const auto = this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? 0;
    return Math.max(lastFrameAt, auto);
  }

  /**
   * An idle operator's ping is answered by the runtime without waking the object. The session
   * passes the pair it wants (null: none): installed only while its replay buffer is empty, the
   * canonical ping whose ack is the last seq sent → the canonical pong carrying the cursor of the
   * operator's stream, replaced whenever either number moves. So a ping whose ack would release
   * frames never matches and reaches the object, and an auto-answered pong is never stale.
   */
  autoAnswer(pair: { lastSent: number; cursor: number } | null): void {
    const want = pair ? `${pair.lastSent}/${pair.cursor}` : null;
    if (want === this.autoPong) return;
    this.autoPong = want;
    if (!pair) {
      this.ctx.setWebSocketAutoResponse();
      return;
    }
    this.ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(canonicalPing(pair.lastSent), canonicalPong(pair.cursor)));
  }
}
