/**
 * A raw operator peer for tests: it speaks frames by hand (no SDK), so each test states exactly
 * what goes over the wire. Socket-agnostic: the workerd tests and the Node tests each adapt their
 * own WebSocket to `PeerSocket`.
 */
import { buildFrame, isSequencedType, newId, readFrame, type Envelope, type MessageType, type Payload } from '../../src/protocol';

/** An envelope as received, its payload read as a plain object. */
export type Frame = Omit<Envelope, 'payload'> & { payload: Record<string, unknown> };

export interface Closed {
  code: number;
  reason: string;
}

export interface PeerSocket {
  send(text: string): void;
  close(code: number, reason: string): void;
  onMessage(fn: (text: string) => void): void;
  onClose(fn: (c: Closed) => void): void;
}

export class Peer {
  readonly frames: Frame[] = [];
  /** Frames from the hub that do not decode as valid catalog messages (should stay empty). */
  readonly invalid: string[] = [];
  private cursor = 0;
  private waiters: (() => void)[] = [];
  readonly closed: Promise<Closed>;
  private closedValue: Closed | null = null;
  /** The operator's outbound numbering. */
  nextSeq = 1;
  /** The operator's contiguous cursor of the hub's stream (advanced as frames are read). */
  hubCursor = 0;

  constructor(readonly socket: PeerSocket) {
    this.closed = new Promise((resolve) => {
      socket.onClose((c) => {
        this.closedValue = c;
        resolve(c);
        this.wake();
      });
    });
    socket.onMessage((text) => {
      // The hub must never send what a conforming operator would refuse: every frame is checked
      // against the catalog, and the harness fails the test on any that is not a valid message.
      const r = readFrame(text);
      if (r.kind !== 'message') this.invalid.push(`${r.kind}: ${'reason' in r ? r.reason : 'unknown type'}: ${text.slice(0, 300)}`);
      this.frames.push(JSON.parse(text) as Frame);
      this.wake();
    });
  }

  get isClosed(): boolean {
    return this.closedValue !== null;
  }

  /** How the connection ended (code and reason), or null while it is open. */
  get closeInfo(): Closed | null {
    return this.closedValue;
  }

  sendRaw(text: string): void {
    this.socket.send(text);
  }

  /** Send a frame; sequenced types take the next seq unless one is given. Returns the frame id. */
  send<T extends MessageType>(
    type: T,
    payload: Payload<T>,
    opts: { seq?: number | null; ack?: number | null; reply_to?: string | null; id?: string } = {},
  ): string {
    const id = opts.id ?? newId();
    const seq = opts.seq !== undefined ? opts.seq : isSequencedType(type) ? this.nextSeq++ : null;
    this.socket.send(
      buildFrame({ type, payload, seq, ack: opts.ack !== undefined ? opts.ack : this.hubCursor, reply_to: opts.reply_to ?? null, id }),
    );
    return id;
  }

  async hello(p: Partial<Payload<'hello'>> & { cluster_id: string }): Promise<Frame> {
    this.send('hello', { operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false, ...p });
    const welcome = await this.next((f) => f.type === 'welcome' || f.type === 'error');
    if (welcome.type !== 'welcome') throw new Error(`expected welcome, got ${JSON.stringify(welcome.payload)}`);
    return welcome;
  }

  /** The next unread frame matching `pred`; frames before it are consumed. */
  async next(pred: (f: Frame) => boolean = () => true, timeoutMs = 5_000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      while (this.cursor < this.frames.length) {
        const f = this.frames[this.cursor++] as Frame;
        if (f.seq !== null && f.seq === this.hubCursor + 1) this.hubCursor = f.seq;
        if (pred(f)) return f;
      }
      if (this.closedValue) throw new Error(`closed (${this.closedValue.code} ${this.closedValue.reason}) while waiting`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for a frame; saw ${this.frames.map((f) => f.type).join(',')}`);
      await this.wait(left);
    }
  }

  /** Wait until the hub's ack (carried on any frame) reaches `seq`. */
  async ackedThrough(seq: number, timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((this.lastAck() ?? -1) < seq) {
      if (this.closedValue) throw new Error(`closed (${this.closedValue.code} ${this.closedValue.reason}) before ack ${seq}`);
      if (Date.now() > deadline) throw new Error(`no ack through ${seq}; last ${this.lastAck()}`);
      await this.wait(50);
    }
  }

  lastAck(): number | null {
    let a: number | null = null;
    for (const f of this.frames) if (f.ack !== null) a = Math.max(a ?? 0, f.ack);
    return a;
  }

  async closedWith(timeoutMs = 5_000): Promise<Closed> {
    let t: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        this.closed,
        new Promise<Closed>((_, reject) => {
          t = setTimeout(() => reject(new Error('socket did not close')), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(t);
    }
  }

  close(code = 1000): void {
    try {
      this.socket.close(code, 'test done');
    } catch {
      // already closed
    }
  }

  private wait(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Poll until `check` returns a value (not undefined/false) or time runs out. */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs = 5_000, stepMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await sleep(stepMs);
  }
}

export const node = (id: string, ready = true) => ({
  node_id: id,
  name: id,
  ready,
  schedulable: true,
  labels: {},
  taints: [],
  allocatable: { gpus: 8, cpu_millis: 64000, memory_mb: 512000 },
});

/** A device.observed payload: an H100 on node n1, with `over` on top. */
export const device = (id: string, over: Partial<Payload<'device.observed'>> = {}): Payload<'device.observed'> => ({
  device_id: id,
  node_id: 'n1',
  vendor: 'nvidia',
  model: 'H100',
  memory_total_mb: 81920,
  health: 'healthy',
  driver_version: '550',
  ...over,
});

export function desired(over: Record<string, unknown> = {}) {
  return {
    workload_id: 'w1',
    min_replicas: 1,
    max_replicas: 2,
    serving: { engine: 'vllm', model: 'm', image: 'img:1', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 },
    ...over,
  };
}

let counter = 0;
export function uniqueName(prefix = 'c'): string {
  return `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
}
