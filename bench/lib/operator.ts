/**
 * A raw operator connection for load generation: `ws` with permessage-deflate off, frames built
 * with the protocol's own `buildFrame`, every received frame parsed once. No SDK: the benchmark
 * states exactly what goes over the wire.
 */
import WebSocket from 'ws';
import { buildFrame, newId, type Envelope, type MessageType, type Payload } from '../../src/protocol';

/** An envelope as received, its payload read as a plain object. */
export type WireFrame = Omit<Envelope, 'payload'> & { payload: Record<string, any> };

export interface ConnectOptions {
  hint?: string | null;
  timeoutMs?: number;
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
  closed: { code: number; reason: string } | null = null;
  private listeners: ((f: WireFrame, receivedAt: number) => void)[] = [];
  private closeListeners: ((code: number) => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const at = performance.now();
      const f = JSON.parse(String(data)) as WireFrame;
      if (f.ack !== null && f.ack > this.hubAck) this.hubAck = f.ack;
      if (f.seq !== null && f.seq === this.hubCursor + 1) this.hubCursor = f.seq;
      for (const l of this.listeners) l(f, at);
    });
    const onClosed = (code: number, reason: string) => {
      if (this.closed) return;
      this.closed = { code, reason };
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
      ws.once('open', () => resolve(new RawOperator(ws)));
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
    this.ws.send(
      buildFrame({
        type,
        payload,
        seq,
        ack: opts.ack !== undefined ? opts.ack : type === 'hello' ? null : this.hubCursor,
        reply_to: opts.reply_to ?? null,
        id: opts.id ?? newId(),
      }),
    );
    return seq;
  }

  sendRaw(text: string): void {
    this.ws.send(text);
  }

  /** Release the hub's replay buffer up to what we have received. */
  sendAck(): void {
    this.sendFrame('ack', {});
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
    try {
      this.ws.close(code, 'bench done');
    } catch {
      // already closed
    }
  }

  terminate(): void {
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
