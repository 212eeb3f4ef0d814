/**
 * A fault-injecting proxy for the operator↔hub link. The SDK dials the proxy; for every client
 * the proxy dials the hub's `/v1/connect` itself (forwarding `Authorization`, `Wingsmith-Session`
 * and `User-Agent`, nothing else) and pumps WebSocket messages both ways. Faults are applied per
 * message, so "a frame" here is exactly one protocol frame.
 *
 * The hub is dialled *before* the client's upgrade is answered, so an HTTP refusal from the hub
 * (401, 503) reaches the SDK as that same HTTP status, and a hub that answers the upgrade and
 * then closes (4403 after an error frame) reaches it as that close.
 *
 * Faults:
 * - `cut()` / `cutAll()`: drop live connections at once, both sides (a TCP reset: 1006 on both
 *   ends), or with a clean close code of the test's choosing;
 * - `cutAfter(n, dir)`: cut the connection that carries the n-th next frame in a direction;
 * - `delay(ms)`: hold every frame for ms in one or both directions (order kept);
 * - `blackhole()`: keep the sockets open but drop every frame (and hold back close
 *   notifications, as a partition does) until lifted; this is what the 30 s silence rule exists
 *   for. Dropping frames on a connection that stays up is harsher than TCP (which stalls rather
 *   than loses bytes): the receiver sees a gap once traffic flows again. `hold` mode is the TCP
 *   partition instead: frames wait and are delivered, in order, when it heals;
 * - `refuse(ms)`: turn new connections away for a while (reset, or an HTTP 503).
 * - `setUpstream(url)`: point new connections at another hub (a restarted one).
 *
 * Independent of vitest so the soak script can use it too.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import WebSocket, { WebSocketServer, type RawData } from 'ws';

/** `up`: operator → hub; `down`: hub → operator. */
export type Direction = 'up' | 'down';
export type Directions = Direction | 'both';

export interface LinkInfo {
  readonly id: number;
  /** The bearer token the operator presented (lets a test cut one cluster's links only). */
  readonly token: string | null;
  readonly sessionHint: string | null;
  readonly openedAt: number;
  framesUp: number;
  framesDown: number;
  /** How each end closed its side, as the proxy saw it (not set when the proxy cut the link). */
  hubClose: { code: number; reason: string } | null;
  operatorClose: { code: number; reason: string } | null;
}

export interface LinkProxyStats {
  /** Connections that reached the hub and were paired. */
  connections: number;
  /** Upgrades turned away by `refuse()`. */
  refused: number;
  /** Upgrades the hub answered with an HTTP status instead (passed through). */
  upstreamHttpErrors: number;
  /** Connections cut by a fault (not closed by either end). */
  cuts: number;
  framesUp: number;
  framesDown: number;
  droppedUp: number;
  droppedDown: number;
}

type QueueItem = { kind: 'frame'; data: RawData; binary: boolean; dueAt: number } | { kind: 'close'; code: number; reason: string; dueAt: number };

interface Pipe {
  queue: QueueItem[];
  timer: NodeJS.Timeout | null;
  /** The close notification was delivered: nothing more goes this way. */
  done: boolean;
}

interface Link {
  info: LinkInfo;
  client: WebSocket | null;
  upstream: WebSocket;
  pipes: Record<Direction, Pipe>;
  dead: boolean;
}

interface Trap {
  dir: Direction;
  remaining: number;
  resolve: (info: LinkInfo) => void;
}

export interface LinkProxyOptions {
  /** The hub, `ws://host:port` or `http://host:port`. */
  upstream: string;
  host?: string;
  port?: number;
}

/** Codes a WebSocket endpoint may put in a close frame (1005/1006/1015 are reserved for reporting). */
function sendableCode(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

function toWs(url: string): string {
  return url.replace(/^http/, 'ws').replace(/\/+$/, '');
}

export class LinkProxy {
  private upstreamUrl: string;
  private readonly links = new Set<Link>();
  private readonly all: Link[] = [];
  private readonly traps: Trap[] = [];
  private nextId = 1;
  private delayMs: Record<Direction, number> = { up: 0, down: 0 };
  private holes: Record<Direction, false | 'drop' | 'hold'> = { up: false, down: false };
  private refuseUntil = 0;
  private refuseHow: 'reset' | 'http503' = 'reset';
  readonly stats: LinkProxyStats = {
    connections: 0,
    refused: 0,
    upstreamHttpErrors: 0,
    cuts: 0,
    framesUp: 0,
    framesDown: 0,
    droppedUp: 0,
    droppedDown: 0,
  };

  private constructor(
    private readonly server: http.Server,
    private readonly wss: WebSocketServer,
    upstream: string,
    readonly port: number,
  ) {
    this.upstreamUrl = toWs(upstream);
  }

  static async start(options: LinkProxyOptions): Promise<LinkProxy> {
    const host = options.host ?? '127.0.0.1';
    const server = http.createServer((_req, res) => {
      res.writeHead(404).end();
    });
    // Compression would only cost CPU: frames are small JSON over loopback (and the SDK turns it off).
    const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('link proxy did not bind a TCP port');
    const proxy = new LinkProxy(server, wss, options.upstream, address.port);
    server.on('upgrade', (req, socket, head) => proxy.onUpgrade(req, socket, head));
    return proxy;
  }

  /** What the SDK should dial: `http://127.0.0.1:PORT`. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** New connections go to this hub from now on (live ones are not touched). */
  setUpstream(url: string): void {
    this.upstreamUrl = toWs(url);
  }

  live(): LinkInfo[] {
    return [...this.links].filter((l) => !l.dead).map((l) => l.info);
  }

  /** Every connection paired so far, oldest first (live or not). */
  history(): LinkInfo[] {
    return this.all.map((l) => l.info);
  }

  /**
   * Cut the live connections that match. `reset` (default) destroys both sockets, which both
   * ends see as 1006; a number closes both ends cleanly with that code instead.
   */
  cut(filter: (l: LinkInfo) => boolean = () => true, how: 'reset' | number = 'reset'): number {
    let n = 0;
    for (const link of [...this.links]) {
      if (link.dead || !filter(link.info)) continue;
      this.kill(link, how);
      n++;
    }
    return n;
  }

  cutAll(how: 'reset' | number = 'reset'): number {
    return this.cut(undefined, how);
  }

  /**
   * Arm a cut: the connection that carries the n-th next frame in `dir` (counting over every
   * connection) is cut right after forwarding it. Resolves with the connection cut.
   */
  cutAfter(n: number, dir: Direction): Promise<LinkInfo> {
    if (!(n >= 1)) throw new RangeError('cutAfter needs n ≥ 1');
    return new Promise((resolve) => this.traps.push({ dir, remaining: n, resolve }));
  }

  /** Disarm every pending `cutAfter`. */
  disarm(): void {
    this.traps.length = 0;
  }

  /** Hold every frame for `ms` (0 turns it off). Order is kept. */
  delay(ms: number, dirs: Directions = 'both'): void {
    for (const d of expand(dirs)) this.delayMs[d] = Math.max(0, ms);
  }

  /**
   * While on, frames in `dirs` are dropped (`drop`, the default) or held (`hold`) until the
   * blackhole is lifted; close notifications are always held and delivered when it is lifted
   * (a healed partition delivers the FIN it withheld).
   */
  blackhole(on: boolean, dirs: Directions = 'both', mode: 'drop' | 'hold' = 'drop'): void {
    for (const d of expand(dirs)) this.holes[d] = on ? mode : false;
    if (!on) for (const link of this.links) for (const d of expand(dirs)) this.pump(link, d);
  }

  /** Turn new connections away for `ms`: `reset` closes the TCP connection, `http503` answers 503. */
  refuse(ms: number, how: 'reset' | 'http503' = 'reset'): void {
    this.refuseUntil = Date.now() + ms;
    this.refuseHow = how;
  }

  /** Accept new connections again now. */
  accept(): void {
    this.refuseUntil = 0;
  }

  async close(): Promise<void> {
    this.disarm();
    for (const link of [...this.links]) this.kill(link, 'reset');
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // -------------------------------------------------------------------------------------------

  private onUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined);
    if (Date.now() < this.refuseUntil) {
      this.stats.refused++;
      if (this.refuseHow === 'http503') {
        socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      } else {
        socket.destroy();
      }
      return;
    }
    const headers: Record<string, string> = {};
    const auth = req.headers.authorization;
    const hint = req.headers['wingsmith-session'];
    const ua = req.headers['user-agent'];
    if (typeof auth === 'string') headers.authorization = auth;
    if (typeof hint === 'string') headers['wingsmith-session'] = hint;
    if (typeof ua === 'string') headers['user-agent'] = ua;

    const upstream = new WebSocket(`${this.upstreamUrl}${req.url ?? '/v1/connect'}`, {
      headers,
      perMessageDeflate: false,
      maxPayload: 64 * 1024 * 1024,
      handshakeTimeout: 10_000,
    });
    const token = typeof auth === 'string' ? auth.replace(/^Bearer\s+/i, '') : null;
    const link: Link = {
      info: {
        id: this.nextId++,
        token,
        sessionHint: typeof hint === 'string' ? hint : null,
        openedAt: Date.now(),
        framesUp: 0,
        framesDown: 0,
        hubClose: null,
        operatorClose: null,
      },
      client: null,
      upstream,
      pipes: { up: newPipe(), down: newPipe() },
      dead: false,
    };
    let paired = false;
    // The operator gave up while we were still dialling the hub.
    const abandon = () => {
      if (!paired) upstream.terminate();
    };
    socket.once('close', abandon);

    upstream.on('unexpected-response', (_r, res) => {
      this.stats.upstreamHttpErrors++;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        const lines = [`HTTP/1.1 ${res.statusCode ?? 502} ${res.statusMessage ?? ''}`];
        for (const [k, v] of Object.entries(res.headers)) {
          if (v === undefined || k === 'transfer-encoding' || k === 'connection' || k === 'content-length') continue;
          for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
        }
        lines.push(`content-length: ${body.length}`, 'connection: close', '', '');
        socket.end(Buffer.concat([Buffer.from(lines.join('\r\n')), body]));
      });
      upstream.terminate();
    });
    upstream.on('error', () => {
      if (!paired && socket.writable) socket.end('HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    });
    // Frames can arrive from the hub before the client side is paired: they wait in the pipe.
    upstream.on('message', (data, binary) => this.onFrame(link, 'down', data, binary));
    upstream.on('close', (code, reason) => this.onEnd(link, 'down', code, reason.toString('utf8')));
    upstream.on('open', () => {
      socket.removeListener('close', abandon);
      if (socket.destroyed) {
        upstream.terminate();
        return;
      }
      paired = true;
      this.wss.handleUpgrade(req, socket, head, (client) => {
        link.client = client;
        this.links.add(link);
        this.all.push(link);
        this.stats.connections++;
        client.on('message', (data, binary) => this.onFrame(link, 'up', data, binary));
        client.on('close', (code, reason) => this.onEnd(link, 'up', code, reason.toString('utf8')));
        client.on('error', () => undefined);
        this.pump(link, 'down');
      });
    });
  }

  private onFrame(link: Link, dir: Direction, data: RawData, binary: boolean): void {
    if (link.dead) return;
    link.pipes[dir].queue.push({ kind: 'frame', data, binary, dueAt: Date.now() + this.delayMs[dir] });
    this.pump(link, dir);
  }

  /** One side closed: tell the other side (after the frames ahead of it), unless cut already. */
  private onEnd(link: Link, from: Direction, code: number, reason: string): void {
    if (link.dead) {
      this.links.delete(link);
      return;
    }
    if (from === 'down') link.info.hubClose ??= { code, reason };
    else link.info.operatorClose ??= { code, reason };
    link.pipes[from].queue.push({ kind: 'close', code, reason, dueAt: Date.now() + this.delayMs[from] });
    this.pump(link, from);
  }

  private target(link: Link, dir: Direction): WebSocket | null {
    return dir === 'up' ? link.upstream : link.client;
  }

  private pump(link: Link, dir: Direction): void {
    const pipe = link.pipes[dir];
    if (pipe.timer) {
      clearTimeout(pipe.timer);
      pipe.timer = null;
    }
    if (link.dead || pipe.done) return;
    const to = this.target(link, dir);
    if (!to) return; // not paired yet; pumped again when it is
    const now = Date.now();
    while (pipe.queue.length > 0) {
      const item = pipe.queue[0] as QueueItem;
      if (item.dueAt > now) {
        pipe.timer = setTimeout(() => this.pump(link, dir), item.dueAt - now);
        return;
      }
      // A held partition delivers nothing until it heals, then everything in order.
      if (this.holes[dir] === 'hold') return;
      if (item.kind === 'close') {
        // A partition withholds the FIN too; it is delivered once the blackhole lifts.
        if (this.holes[dir]) return;
        pipe.queue.shift();
        pipe.done = true;
        closeWith(to, item.code, item.reason);
        // Both ends are (or are about to be) closed: this pair is over.
        link.dead = true;
        this.links.delete(link);
        return;
      }
      pipe.queue.shift();
      if (this.holes[dir]) {
        if (dir === 'up') this.stats.droppedUp++;
        else this.stats.droppedDown++;
        continue;
      }
      if (to.readyState !== WebSocket.OPEN) continue;
      to.send(item.data, { binary: item.binary });
      if (dir === 'up') {
        link.info.framesUp++;
        this.stats.framesUp++;
      } else {
        link.info.framesDown++;
        this.stats.framesDown++;
      }
      if (this.springTraps(link, dir)) return;
    }
  }

  /** True when a trap cut this link. */
  private springTraps(link: Link, dir: Direction): boolean {
    let fired: Trap | null = null;
    for (const t of this.traps) {
      if (t.dir !== dir) continue;
      t.remaining--;
      if (t.remaining <= 0 && !fired) fired = t;
    }
    if (!fired) return false;
    this.traps.splice(this.traps.indexOf(fired), 1);
    // Traps that reached zero on the same frame fire on it too (one cut).
    for (let i = this.traps.length - 1; i >= 0; i--) {
      const t = this.traps[i] as Trap;
      if (t.dir === dir && t.remaining <= 0) {
        this.traps.splice(i, 1);
        t.resolve(link.info);
      }
    }
    this.kill(link, 'reset');
    fired.resolve(link.info);
    return true;
  }

  private kill(link: Link, how: 'reset' | number): void {
    if (link.dead) return;
    link.dead = true;
    this.links.delete(link);
    this.stats.cuts++;
    for (const d of ['up', 'down'] as const) {
      const p = link.pipes[d];
      if (p.timer) clearTimeout(p.timer);
      p.timer = null;
      p.queue.length = 0;
      p.done = true;
    }
    for (const ws of [link.client, link.upstream]) {
      if (!ws) continue;
      if (how === 'reset') ws.terminate();
      else closeWith(ws, how, 'cut by the link proxy');
    }
  }
}

function newPipe(): Pipe {
  return { queue: [], timer: null, done: false };
}

function expand(d: Directions): Direction[] {
  return d === 'both' ? ['up', 'down'] : [d];
}

/** Pass a close on with the same code where the protocol allows sending it; else reset. */
function closeWith(ws: WebSocket, code: number, reason: string): void {
  if (ws.readyState === WebSocket.CLOSED || ws.readyState === WebSocket.CLOSING) return;
  if (ws.readyState === WebSocket.CONNECTING) {
    ws.terminate();
    return;
  }
  if (sendableCode(code)) ws.close(code, Buffer.from(reason).subarray(0, 120).toString('utf8'));
  else if (code === 1005) ws.close();
  else ws.terminate();
  // A peer that never answers the close must not hold the socket.
  setTimeout(() => ws.terminate(), 3_000).unref();
}
