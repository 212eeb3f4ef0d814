/**
 * A raw operator peer for workerd tests: it speaks frames by hand (no SDK), so each test states
 * exactly what goes over the wire.
 */
import { env, exports } from 'cloudflare:workers';
import { buildFrame, newId, type MessageType, type Payload } from '../../../src/protocol';
import type { HubEnv } from '../../../src/hub/env';
import { Pg } from '../../../src/hub/pg';

export const hubEnv = env as unknown as HubEnv;
export const worker = (exports as unknown as { default: Fetcher }).default;
export const ADMIN = { authorization: `Bearer ${hubEnv.ADMIN_TOKEN}`, 'content-type': 'application/json' };

export interface Frame {
  v: number;
  type: string;
  id: string;
  seq: number | null;
  ack: number | null;
  reply_to: string | null;
  ts: string;
  payload: Record<string, unknown>;
}

export async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await worker.fetch(`http://hub.test/admin${path}`, {
    method,
    headers: ADMIN,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

export interface TestCluster {
  uid: string;
  name: string;
  token: string;
}

let counter = 0;
export async function newCluster(prefix = 'c'): Promise<TestCluster> {
  const name = `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  const r = await admin('POST', '/clusters', { name });
  if (r.status !== 201) throw new Error(`create cluster: ${r.status} ${JSON.stringify(r.json)}`);
  return { uid: r.json.uid, name: r.json.name, token: r.json.enrollment_token };
}

/** A short-lived connection to the test database, for assertions. */
export async function sql<R = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<R[]> {
  const pg = new Pg(hubEnv, { idleCloseMs: 0 });
  try {
    return (await pg.query<R>(text, params)).rows;
  } finally {
    await pg.close();
  }
}

export interface Closed {
  code: number;
  reason: string;
}

export class Peer {
  readonly frames: Frame[] = [];
  private cursor = 0;
  private waiters: (() => void)[] = [];
  readonly closed: Promise<Closed>;
  private closedValue: Closed | null = null;
  /** The operator's outbound numbering. */
  nextSeq = 1;
  /** The operator's contiguous cursor of the hub's stream. */
  hubCursor = 0;

  constructor(readonly ws: WebSocket) {
    this.closed = new Promise((resolve) => {
      ws.addEventListener('close', (e) => {
        this.closedValue = { code: e.code, reason: e.reason };
        resolve(this.closedValue);
        this.wake();
      });
    });
    ws.addEventListener('message', (e) => {
      this.frames.push(JSON.parse(String(e.data)) as Frame);
      this.wake();
    });
  }

  static async connect(token: string, hint?: string | null): Promise<Peer> {
    const res = await worker.fetch('http://hub.test/v1/connect', {
      headers: {
        upgrade: 'websocket',
        authorization: `Bearer ${token}`,
        ...(hint ? { 'wingsmith-session': hint } : {}),
      },
    });
    if (res.status !== 101 || !res.webSocket) throw new Error(`connect: HTTP ${res.status} ${await res.text()}`);
    res.webSocket.accept();
    return new Peer(res.webSocket);
  }

  get isClosed(): boolean {
    return this.closedValue !== null;
  }

  sendRaw(text: string): void {
    this.ws.send(text);
  }

  send<T extends MessageType>(type: T, payload: Payload<T>, opts: { seq?: number | null; ack?: number | null; reply_to?: string | null; id?: string } = {}): string {
    const id = opts.id ?? newId();
    const sequenced = !['hello', 'welcome', 'ping', 'pong', 'ack'].includes(type);
    const seq = opts.seq !== undefined ? opts.seq : sequenced ? this.nextSeq++ : null;
    this.ws.send(buildFrame({ type, payload, seq, ack: opts.ack !== undefined ? opts.ack : this.hubCursor, reply_to: opts.reply_to ?? null, id }));
    return id;
  }

  async hello(p: Partial<Payload<'hello'>> & { cluster_id: string }): Promise<Frame> {
    this.send('hello', {
      operator_version: '0.1.0',
      session_id: null,
      resume_from: null,
      lossy: false,
      ...p,
    });
    const welcome = await this.next((f) => f.type === 'welcome' || f.type === 'error');
    if (welcome.type !== 'welcome') throw new Error(`expected welcome, got ${JSON.stringify(welcome.payload)}`);
    return welcome;
  }

  /** The next unread frame matching `pred` (frames before it are consumed). */
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
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Wait until the hub's ack (on any frame) reaches `seq`. */
  async ackedThrough(seq: number, timeoutMs = 5_000): Promise<void> {
    const seen = () => this.frames.some((f) => f.ack !== null && f.ack >= seq);
    const deadline = Date.now() + timeoutMs;
    while (!seen()) {
      if (this.closedValue) throw new Error(`closed (${this.closedValue.code}) before ack ${seq}`);
      if (Date.now() > deadline) throw new Error(`no ack through ${seq}; last ${this.lastAck()}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 50);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  lastAck(): number | null {
    let a: number | null = null;
    for (const f of this.frames) if (f.ack !== null) a = Math.max(a ?? 0, f.ack);
    return a;
  }

  async closedWith(timeoutMs = 5_000): Promise<Closed> {
    return Promise.race([
      this.closed,
      new Promise<Closed>((_, reject) => setTimeout(() => reject(new Error('socket did not close')), timeoutMs)),
    ]);
  }

  close(code = 1000): void {
    try {
      this.ws.close(code, 'test done');
    } catch {
      // closed
    }
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
