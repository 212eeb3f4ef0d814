/**
 * A record of everything one cluster's operator(s) said and heard on the wire, taken at the
 * SDK's transport seam (`OperatorClientOptions.dial`) around the real `ws` transport. It is the
 * ground truth the convergence checker holds the plane to: which frames were sent in which
 * session, which of them the hub acknowledged, which hellos said lossy, which welcomes were fresh.
 *
 * Sessions, not links, own sequence numbers: a resumed session continues its numbering on a new
 * connection, a fresh one restarts at 1. So sent frames are kept per session id (from the
 * welcome the connection got) and the hub's ack on any frame of that connection applies to that
 * session. A replay re-sends the same seq; the record keeps the latest text for it.
 *
 * Hooks can rewrite a frame in either direction (a poison frame made from a real one, keeping its
 * seq) or drop it. Independent of vitest.
 */
import { readFrame } from '../../../src/protocol';
import { wsDialer } from '../../../src/operator/ws-transport';
import type { Dialer, Transport } from '../../../src/operator/transport';

export interface WireFrame {
  v: unknown;
  type: string;
  id: string;
  seq: number | null;
  ack: number | null;
  reply_to: string | null;
  payload: Record<string, unknown>;
}

export interface SentFrame {
  type: string;
  id: string;
  seq: number;
  replyTo: string | null;
  payload: Record<string, unknown>;
  /** Rewritten by a hook on its way out (a deliberately poisoned frame). */
  mutated: boolean;
  sentAt: number;
}

export interface LinkRecord {
  id: number;
  openedAt: number;
  hello: Record<string, unknown> | null;
  welcome: Record<string, unknown> | null;
  /** An error frame received before the welcome (a refusal explains itself first). */
  handshakeError: Record<string, unknown> | null;
  close: { code: number; reason: string; httpStatus: number | null } | null;
  sessionId: string | null;
}

export interface SessionRecord {
  id: string;
  sent: Map<number, SentFrame>;
  /** The hub's highest ack seen for this session. */
  acked: number;
  /** Each rise of `acked`: on which link, by which frame type, when. */
  ackRises: { ack: number; link: number; type: string; at: number }[];
  /** Hub frames received in this session, in order (sequenced ones only). */
  received: WireFrame[];
}

/** Return a replacement text, `null` to drop the frame, or `undefined` to leave it alone. */
export type FrameHook = (frame: WireFrame, text: string) => string | null | undefined;

export class WireTap {
  readonly links: LinkRecord[] = [];
  readonly sessions = new Map<string, SessionRecord>();
  /** Frames the hub sent that do not decode as valid catalog messages (checked before any hook rewrites them). */
  readonly invalidFromHub: string[] = [];
  /** Hooks on frames the operator writes; each runs once per frame until it returns non-undefined, then is removed. */
  private readonly outHooks: FrameHook[] = [];
  private readonly inHooks: FrameHook[] = [];
  private nextLink = 1;
  private lastWelcomed: string | null = null;

  /** Rewrite (or drop) the first outgoing frame the hook claims. */
  onceOut(hook: FrameHook): void {
    this.outHooks.push(hook);
  }

  /** Rewrite (or drop) the first incoming frame the hook claims. */
  onceIn(hook: FrameHook): void {
    this.inHooks.push(hook);
  }

  get pendingHooks(): number {
    return this.outHooks.length + this.inHooks.length;
  }

  // --- views -----------------------------------------------------------------------------------

  get hellos(): Record<string, unknown>[] {
    return this.links.flatMap((l) => (l.hello ? [l.hello] : []));
  }

  get welcomes(): Record<string, unknown>[] {
    return this.links.flatMap((l) => (l.welcome ? [l.welcome] : []));
  }

  closes(code?: number): LinkRecord[] {
    return this.links.filter((l) => l.close !== null && (code === undefined || l.close.code === code));
  }

  /** Every sequenced frame sent, over every session, oldest session first. */
  *sentFrames(): IterableIterator<SentFrame & { session: string }> {
    for (const s of this.sessions.values()) for (const f of s.sent.values()) yield { ...f, session: s.id };
  }

  isAcked(session: string, seq: number): boolean {
    return (this.sessions.get(session)?.acked ?? 0) >= seq;
  }

  /** The hub's highest ack in each session now: what a read of the plane begun now must contain. */
  ackMarks(): Map<string, number> {
    return new Map([...this.sessions.values()].map((s) => [s.id, s.acked]));
  }

  /**
   * Frame ids of events sent (any session) and of those the hub acknowledged: by now, or by the
   * `marks` taken before a read of the plane (an ack that came during the read may be for a
   * commit the read missed).
   */
  events(marks?: ReadonlyMap<string, number>): { sent: Set<string>; acked: Set<string> } {
    const sent = new Set<string>();
    const acked = new Set<string>();
    for (const s of this.sessions.values()) {
      const through = marks ? (marks.get(s.id) ?? 0) : s.acked;
      for (const f of s.sent.values()) {
        if (!f.type.endsWith('.event') || f.mutated) continue;
        sent.add(f.id);
        if (f.seq <= through) acked.add(f.id);
      }
    }
    return { sent, acked };
  }

  /** Where a frame was sent: its session, seq, when, the session's highest ack, and the links that carried the session. */
  whereSent(frameId: string): string | null {
    for (const s of this.sessions.values()) {
      for (const f of s.sent.values()) {
        if (f.id !== frameId) continue;
        const links = this.links
          .filter((l) => l.sessionId === s.id)
          .map((l) => `link ${l.id}${l.welcome?.full_resync ? ' fresh' : ''}${l.close ? ` closed ${l.close.code}` : ''}`)
          .join(', ');
        const by = s.ackRises.find((r) => r.ack >= f.seq);
        const ackedBy = by ? `first acked by a ${by.type} on link ${by.link} at ${new Date(by.at).toISOString()} (ack ${by.ack})` : 'never acked';
        return `session ${s.id}, seq ${f.seq}, sent ${new Date(f.sentAt).toISOString()}, ${ackedBy}, acked through ${s.acked}; ${links}`;
      }
    }
    return null;
  }

  /**
   * The session the most recent welcome named (null before any). By the welcome's arrival, not by
   * its link's dialling: two processes of one cluster (a displacement) can be welcomed in the
   * other order than they dialled, the later welcome displacing the earlier session.
   */
  get currentSession(): string | null {
    return this.lastWelcomed;
  }

  /** Frames of the current session sent and not yet acknowledged. */
  get unackedInCurrent(): number {
    const s = this.currentSession ? this.sessions.get(this.currentSession) : undefined;
    if (!s) return 0;
    let n = 0;
    for (const seq of s.sent.keys()) if (seq > s.acked) n++;
    return n;
  }

  // --- the dialer --------------------------------------------------------------------------------

  /** A dialer that records through this tap; the real `ws` transport underneath by default. */
  dialer(inner: Dialer = wsDialer()): Dialer {
    return (request, events) => {
      const link: LinkRecord = {
        id: this.nextLink++,
        openedAt: Date.now(),
        hello: null,
        welcome: null,
        handshakeError: null,
        close: null,
        sessionId: null,
      };
      this.links.push(link);
      const transport = inner(request, {
        onOpen: () => events.onOpen(),
        onMessage: (text, binary) => {
          const out = this.incoming(link, text);
          if (out !== null) events.onMessage(out, binary);
        },
        onClose: (code, reason, httpStatus, httpBody, retryAfter) => {
          link.close ??= { code, reason, httpStatus: httpStatus ?? null };
          events.onClose(code, reason, httpStatus, httpBody, retryAfter);
        },
      });
      const tapped: Transport = {
        send: (text) => {
          const out = this.outgoing(link, text);
          if (out !== null) transport.send(out);
        },
        close: (code, reason) => transport.close(code, reason),
        get bufferedAmount() {
          return transport.bufferedAmount;
        },
      };
      return tapped;
    };
  }

  private outgoing(link: LinkRecord, text: string): string | null {
    let f = parse(text);
    if (!f) return text;
    let mutated = false;
    const hooked = runHooks(this.outHooks, f, text);
    if (hooked !== undefined) {
      if (hooked === null) return null;
      mutated = hooked !== text;
      text = hooked;
      f = parse(text) ?? f;
    }
    if (f.type === 'hello') link.hello = f.payload;
    if (f.seq !== null && link.sessionId) {
      const s = this.session(link.sessionId);
      s.sent.set(f.seq, { type: f.type, id: f.id, seq: f.seq, replyTo: f.reply_to, payload: f.payload, mutated, sentAt: Date.now() });
    }
    return text;
  }

  private incoming(link: LinkRecord, text: string): string | null {
    const checked = readFrame(text);
    if (checked.kind !== 'message') {
      this.invalidFromHub.push(`${checked.kind}: ${'reason' in checked ? checked.reason : 'unknown type'}: ${text.slice(0, 300)}`);
    }
    let f = parse(text);
    if (!f) return text;
    const hooked = runHooks(this.inHooks, f, text);
    if (hooked !== undefined) {
      if (hooked === null) return null;
      text = hooked;
      f = parse(text) ?? f;
    }
    if (f.type === 'welcome') {
      link.welcome = f.payload;
      const sid = typeof f.payload.session_id === 'string' ? f.payload.session_id : null;
      link.sessionId = sid;
      if (sid) {
        this.session(sid);
        this.lastWelcomed = sid;
      }
    } else if (f.type === 'error' && !link.welcome) {
      link.handshakeError = f.payload;
    }
    if (link.sessionId) {
      const s = this.session(link.sessionId);
      if (typeof f.ack === 'number' && f.ack > s.acked) {
        s.acked = f.ack;
        s.ackRises.push({ ack: f.ack, link: link.id, type: f.type, at: Date.now() });
      }
      if (f.seq !== null) s.received.push(f);
    }
    return text;
  }

  private session(id: string): SessionRecord {
    let s = this.sessions.get(id);
    if (!s) {
      s = { id, sent: new Map(), acked: 0, ackRises: [], received: [] };
      this.sessions.set(id, s);
    }
    return s;
  }
}

function runHooks(hooks: FrameHook[], f: WireFrame, text: string): string | null | undefined {
  for (let i = 0; i < hooks.length; i++) {
    const r = (hooks[i] as FrameHook)(f, text);
    if (r !== undefined) {
      hooks.splice(i, 1);
      return r;
    }
  }
  return undefined;
}

function parse(text: string): WireFrame | null {
  try {
    const v = JSON.parse(text) as unknown;
    if (!v || typeof v !== 'object') return null;
    const o = v as Record<string, unknown>;
    return {
      v: o.v,
      type: typeof o.type === 'string' ? o.type : '',
      id: typeof o.id === 'string' ? o.id : '',
      seq: typeof o.seq === 'number' ? o.seq : null,
      ack: typeof o.ack === 'number' ? o.ack : null,
      reply_to: typeof o.reply_to === 'string' ? o.reply_to : null,
      payload: o.payload && typeof o.payload === 'object' ? (o.payload as Record<string, unknown>) : {},
    };
  } catch {
    return null;
  }
}
