/**
 * WebSocket → TCP proxy that lets the Neon driver (in workerd or Node) reach a plain Postgres.
 *
 * The driver opens `ws://<proxy>/v1?address=host:port`; the address is ignored and every
 * connection goes to the pinned target, so the proxy cannot be used to reach anything else.
 */
import net from 'node:net';
import type { IncomingMessage } from 'node:http';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';

export interface PgWsProxyOptions {
  target: { host: string; port: number };
  /** 0 (default) picks an ephemeral port. */
  port?: number;
  host?: string;
}

export interface PgWsProxy {
  port: number;
  /** `host:port`, the value of `PG_WS_PROXY`. */
  url: string;
  /** Live WebSocket↔TCP pairs; a pair leaves this count once both sides are closed. */
  activeConnections(): number;
  close(): Promise<void>;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const TERMINATE = 0x58; // 'X'

/**
 * Follows the frontend (client → server) message stream just enough to spot Terminate.
 *
 * Matching the bytes `X 0 0 0 4` at the end of a chunk would misfire on a parameter value that
 * happens to end with them, so we walk message boundaries instead: an untyped startup phase
 * (SSLRequest/GSSENCRequest, then StartupMessage), then `type + int32 length` messages. Only
 * headers are buffered; bodies are skipped by count.
 */
class FrontendFramer {
  private startup = true;
  private header = Buffer.alloc(0);
  private skip = 0;
  /** The stream became TLS (server answered 'S' to SSLRequest): framing is no longer visible. */
  opaque = false;
  private awaitingSslAnswer = false;

  /** Returns true when a Terminate message has been seen. */
  feed(chunk: Buffer): boolean {
    if (this.opaque) return false;
    let offset = 0;
    while (offset < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - offset);
        this.skip -= n;
        offset += n;
        continue;
      }
      const headerLen = this.startup ? 8 : 5;
      const need = headerLen - this.header.length;
      const take = Math.min(need, chunk.length - offset);
      this.header = Buffer.concat([this.header, chunk.subarray(offset, offset + take)]);
      offset += take;
      if (this.header.length < headerLen) break;

      if (this.startup) {
        const len = this.header.readInt32BE(0);
        const code = this.header.readInt32BE(4);
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) this.awaitingSslAnswer = true;
        else this.startup = false;
        this.skip = Math.max(0, len - 8);
      } else {
        const type = this.header[0];
        const len = this.header.readInt32BE(1);
        if (type === TERMINATE && len === 4) return true;
        this.skip = Math.max(0, len - 4);
      }
      this.header = Buffer.alloc(0);
    }
    return false;
  }

  /** Called with the first bytes the server sends. */
  observeBackend(chunk: Buffer): void {
    if (!this.awaitingSslAnswer || chunk.length === 0) return;
    this.awaitingSslAnswer = false;
    if (chunk[0] === 0x53 /* 'S' */) this.opaque = true;
  }
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/**
 * Whether an upgrade may be joined to the database: not one a web page asked for. Every browser
 * sends `Origin` with a WebSocket handshake, and a page is free to dial 127.0.0.1 on any port; this
 * proxy hands whoever connects a Postgres session (PGlite takes any user, and a local server with
 * trust authentication a superuser, whose COPY … TO PROGRAM runs commands). The hub's driver in
 * workerd, the Neon driver in Node and `ws` send no `Origin`.
 */
function fromNoBrowser(info: { origin: string; req: IncomingMessage }): boolean {
  return info.req.headers.origin === undefined;
}

/** Pause the TCP reader when the WebSocket has this much unsent data queued. */
const WS_HIGH_WATER = 4 * 1024 * 1024;

export async function startPgWsProxy(options: PgWsProxyOptions): Promise<PgWsProxy> {
  const { target } = options;
  const host = options.host ?? '127.0.0.1';
  const live = new Set<{ ws: WebSocket; tcp: net.Socket }>();

  // Compression only costs CPU here: Postgres traffic is small frames over loopback.
  const wss = new WebSocketServer({ host, port: options.port ?? 0, perMessageDeflate: false, verifyClient: fromNoBrowser });

  wss.on('connection', (ws) => {
    const tcp = net.connect({ host: target.host, port: target.port });
    tcp.setNoDelay(true);
    const pair = { ws, tcp };
    live.add(pair);
    const framer = new FrontendFramer();
    let wsClosed = false;
    let tcpClosed = false;
    const settle = () => {
      if (wsClosed && tcpClosed) live.delete(pair);
    };

    ws.on('message', (data) => {
      const chunk = toBuffer(data);
      const terminate = framer.feed(chunk);
      // Anything after Terminate (or after the database went away) has nowhere to go.
      if (!tcp.writable) return;
      const flushed = tcp.write(chunk);
      if (terminate) {
        // Postgres itself closes after Terminate, but a backend that does not (PGlite's socket
        // server) would keep the connection, and its slot, forever.
        tcp.end();
        return;
      }
      if (!flushed && tcp.writable && !ws.isPaused) {
        ws.pause();
        tcp.once('drain', () => ws.resume());
      }
    });

    tcp.on('data', (chunk: Buffer) => {
      framer.observeBackend(chunk);
      if (ws.readyState !== ws.OPEN) return;
      ws.send(chunk, { binary: true }, () => {
        if (tcp.isPaused() && ws.bufferedAmount < WS_HIGH_WATER) tcp.resume();
      });
      if (ws.bufferedAmount >= WS_HIGH_WATER) tcp.pause();
    });

    ws.on('close', () => {
      wsClosed = true;
      if (!tcp.destroyed) tcp.end();
      // A peer that never answers the FIN must not hold the pair open.
      setTimeout(() => tcp.destroy(), 2_000).unref();
      settle();
    });
    ws.on('error', () => {
      tcp.destroy();
    });

    tcp.on('close', () => {
      tcpClosed = true;
      // A paused socket would never read the client's answer to our close frame.
      if (ws.isPaused) ws.resume();
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(1000);
      settle();
    });
    tcp.on('error', () => {
      // An unreachable or crashed database: tell the client the way Postgres would, by hanging
      // up; 1011 makes the cause visible in the driver's error.
      if (ws.readyState === ws.OPEN) ws.close(1011, 'upstream error');
    });
  });

  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  const address = wss.address();
  if (typeof address === 'string' || address === null) throw new Error('proxy did not bind a TCP port');

  return {
    port: address.port,
    url: `${host}:${address.port}`,
    activeConnections: () => live.size,
    close: async () => {
      for (const { ws, tcp } of live) {
        ws.terminate();
        tcp.destroy();
      }
      live.clear();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
