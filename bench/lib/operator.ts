/**
 * A raw operator connection for load generation: `ws` with permessage-deflate off, frames built
 * with the protocol's own `buildFrame`, every received frame parsed once. No SDK: the benchmark
 * states exactly what goes over the wire.
 *
 * Liveness and acknowledgement as the SDK does them (src/operator/client.ts, writer.ts): after
 * the welcome it pings every `limits.ping_interval_s` (10 s) with the canonical ping whose `ack`
 * is its contiguous cursor of the hub's stream, and when that cursor moves it sends an `ack`
 * 50 ms later unless a frame it sends carries it first. So an idle session's replay buffer
 * empties and its pings match the pair the hub installs for the runtime to answer: an idle
 * raw operator lets its session object sleep, as an SDK would. Scenarios that study
 * acknowledgement itself (resume, resync) turn the automatic ack off and ack by hand.
 */
import WebSocket from 'ws';
import { buildFrame, canonicalPing, newId, type Envelope, type MessageType, type Payload } from '../../src/protocol';

/** The SDK's defaults (src/operator/client-types.ts): ping cadence and the delay before a lone ack. */
export const SDK_PING_MS = 10_000;
export const SDK_ACK_DELAY_MS = 50;

/** An envelope as received, its payload read as a plain object. */
export type WireFrame = Omit<Envelope, 'payload'> & { payload: Record<string, any> };

export interface ConnectOptions {
  hint?: string | null;
  timeoutMs?: number;
  /** Ping this often after the welcome (canonical ping); false: never. Default: the SDK's 10 s. */
  pingMs?: number | false;
  /** Delay of the first ping after the welcome (a fleet spreads its pings); default `pingMs`. */
  firstPingMs?: number;
  /** Send an `ack` this long after the cursor moves unless a frame carried it; false: only by hand. Default: the SDK's 50 ms. */
  autoAckMs?: number | false;
}

export class ConnectError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
  }
}

export class RawOperator {
  /** The operator's outbound numbering. */
  nextSeq = 1;
  /** Highest contiguous seq of the hub's stream received. */
  hubCursor = 0;
  /** Highest `ack` the hub has sent (its cursor of our stream). */
  hubAck = 0;
  /** Highest cursor a frame we sent carried as `ack`. */
  lastAckSent = 0;
  pings = 0;
  pongs = 0;
  closed: { code: number; reason: string } | null = null;
  private listeners: ((f: WireFrame, receivedAt: number) => void)[] = [];
  private closeListeners: ((code: number) => void)[] = [];
  private pingTimer: ReturnType<typeof setTimeout> | null = null;
  private ackTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly pingMs: number | false;
  private readonly firstPingMs: number | undefined;
  private readonly autoAckMs: number | false;

  private constructor(
    readonly ws: WebSocket,
    options: ConnectOptions,
  ) {
    this.pingMs = options.pingMs ?? SDK_PING_MS;
    this.firstPingMs = options.firstPingMs;
    this.autoAckMs = options.autoAckMs ?? SDK_ACK_DELAY_MS;
    ws.on('message', (data) => {
      const at = performance.now();
      const f = JSON.parse(String(data)) as WireFrame;
      if (f.ack !== null && f.ack > this.hubAck) this.hubAck = f.ack;
      if (f.seq !== null && f.seq === this.hubCursor + 1) {
        this.hubCursor = f.seq;
        this.cursorMoved();
      }
      if (f.type === 'pong') this.pongs++;
      else if (f.type === 'welcome') this.startPinging();
      for (const l of this.listeners) l(f, at);
    });
    const onClosed = (code: number, reason: string) => {
      if (this.closed) return;
      this.closed = { code, reason };
      this.stopTimers();
      for (const l of this.closeListeners) l(code);
    };
    // The close frame is what the protocol speaks; `close` itself may follow the TCP teardown late.
    const receiver = (ws as unknown as { _receiver?: { on(e: 'conclude', f: (code: number, reason: Buffer) => void): void } })._receiver;
    receiver?.on('conclude', (code, reason) => onClosed(code, String(reason)));
    ws.on('close', (code, reason) => onClosed(code, String(reason)));
    ws.on('error', () => undefined);
  }

  /** Open the WebSocket (resolves on `open`). */
  static connect(wsUrl: string, token: string, options: ConnectOptions = {}): Promise<RawOperator> {
    const ws = new WebSocket(`${wsUrl}/v1/connect`, {
      headers: { authorization: `Bearer ${token}`, ...(options.hint ? { 'wingsmith-session': options.hint } : {}) },
      perMessageDeflate: false,
      handshakeTimeout: options.timeoutMs ?? 30_000,
    });
    return new Promise<RawOperator>((resolve, reject) => {
      ws.once('open', () => resolve(new RawOperator(ws, options)));
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        reject(new ConnectError(`HTTP ${res.statusCode}`, res.statusCode ?? null));
        ws.terminate();
      });
      ws.once('error', (err) => reject(new ConnectError(err.message, null)));
    });
  }

  onFrame(fn: (f: WireFrame, receivedAt: number) => void): () => void {
    this.listeners.push(fn);
    return () => {
      this.listeners = this.listeners.filter((l) => l !== fn);
    };
  }

  onClose(fn: (code: number) => void): void {
    if (this.closed) fn(this.closed.code);
    else this.closeListeners.push(fn);
  }

  /** The next frame matching `pred` (from now on). */
  next(pred: (f: WireFrame) => boolean, timeoutMs = 30_000): Promise<WireFrame> {
    const p = new Promise<WireFrame>((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a frame`));
      }, timeoutMs);
      const off = this.onFrame((f) => {
        if (pred(f)) {
          clearTimeout(timer);
          off();
          resolve(f);
        }
      });
      this.onClose((code) => {
        clearTimeout(timer);
        off();
        reject(new Error(`closed ${code} while waiting for a frame`));
      });
    });
    // A waiter abandoned after a refusal must not crash the process; awaiting it still rejects.
    p.catch(() => undefined);
    return p;
  }

  /** Send hello; resolves with the welcome (rejects on an error frame or a close). */
  async hello(p: Partial<Payload<'hello'>> & { cluster_id: string }, timeoutMs = 30_000): Promise<WireFrame> {
    const reply = this.next((f) => f.type === 'welcome' || f.type === 'error', timeoutMs);
    this.sendFrame('hello', { operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false, ...p });
    const f = await reply;
    if (f.type !== 'welcome') throw new Error(`refused: ${JSON.stringify(f.payload)}`);
    return f;
  }

  /** Build and send; sequenced types take the next seq. Returns the frame's seq (or null). */
  sendFrame<T extends MessageType>(
    type: T,
    payload: Payload<T>,
    opts: { seq?: number | null; reply_to?: string | null; id?: string; ack?: number | null } = {},
  ): number | null {
    const sequenced = !['hello', 'welcome', 'ping', 'pong', 'ack'].includes(type);
    const seq = opts.seq !== undefined ? opts.seq : sequenced ? this.nextSeq++ : null;
    const ack = opts.ack !== undefined ? opts.ack : type === 'hello' ? null : this.hubCursor;
    this.ws.send(
      buildFrame({
        type,
        payload,
        seq,
        ack,
        reply_to: opts.reply_to ?? null,
        id: opts.id ?? newId(),
      }),
    );
    if (ack !== null) this.carried(ack);
    return seq;
  }

  sendRaw(text: string): void {
    this.ws.send(text);
  }

  /** The cursor to put in a frame's `ack` when building it by hand (`sendRaw`): noted as carried. */
  ackToSend(): number {
    this.carried(this.hubCursor);
    return this.hubCursor;
  }

  /** Release the hub's replay buffer up to what we have received. */
  sendAck(): void {
    this.sendFrame('ack', {});
  }

  /** The SDK's ping: one canonical text per cursor, no id, no ts (PROTOCOL.md, liveness). */
  ping(): void {
    if (this.closed) return;
    this.ws.send(canonicalPing(this.hubCursor));
    this.carried(this.hubCursor);
    this.pings++;
  }

  private carried(ack: number): void {
    if (ack > this.lastAckSent) this.lastAckSent = ack;
  }

  /** As the SDK's writer: an ack goes out after the delay unless a frame carries the cursor first. */
  private cursorMoved(): void {
    if (this.autoAckMs === false || this.ackTimer) return;
    this.ackTimer = setTimeout(() => {
      this.ackTimer = null;
      if (!this.closed && this.hubCursor > this.lastAckSent) this.sendAck();
    }, this.autoAckMs);
  }

  private startPinging(): void {
    if (this.pingMs === false || this.pingTimer) return;
    const every = this.pingMs;
    const tick = () => {
      this.ping();
      this.pingTimer = setTimeout(tick, every);
    };
    this.pingTimer = setTimeout(tick, this.firstPingMs ?? every);
  }

  private stopTimers(): void {
    if (this.pingTimer) clearTimeout(this.pingTimer);
    if (this.ackTimer) clearTimeout(this.ackTimer);
    this.pingTimer = null;
    this.ackTimer = null;
  }

  /** Wait until the hub's ack reaches `seq`. */
  ackedThrough(seq: number, timeoutMs = 60_000): Promise<void> {
    if (this.hubAck >= seq) return Promise.resolve();
    return this.next((f) => (f.ack ?? 0) >= seq, timeoutMs).then(() => undefined);
  }

  get bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  close(code = 1000): void {
    this.stopTimers();
    try {
      this.ws.close(code, 'bench done');
    } catch {
      // already closed
    }
  }

  terminate(): void {
    this.stopTimers();
    this.ws.terminate();
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Run `fn` over `items` with at most `limit` in flight. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (t: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i] as T, i);
    }
  });
  await Promise.all(workers);
  return out;
}

/** `p`, or a rejection after `ms` (the timer is cleared either way). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish in ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}
