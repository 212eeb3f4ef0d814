/**
 * Postgres from Node through the same WebSocket proxy and driver that workerd uses, so scripts
 * and tests exercise exactly the production code path (and no `pg` package is needed).
 */
import net from 'node:net';
import { Client } from '@neondatabase/serverless';
import ws from 'ws';

export interface PgNodeOptions {
  connectionTimeoutMillis?: number;
}

/**
 * An unconnected Neon Client routed through the proxy at `proxyUrl` ("host:port"), or, with
 * `proxyUrl` undefined, straight to Neon's own WebSocket endpoint (a real Neon URL).
 * Configured per client rather than through the global `neonConfig`, which the hub's own
 * module (src/hub/pg.ts) also writes when it runs in the same process.
 */
export function pgClient(databaseUrl: string, proxyUrl: string | undefined, options: PgNodeOptions = {}): Client {
  const client = new Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 5_000,
  });
  const config = client.neonConfig;
  // Node 20 has no global WebSocket.
  config.webSocketConstructor = ws as unknown as typeof config.webSocketConstructor;
  // The driver gathers a statement's protocol messages into one WebSocket message and sends it
  // from setTimeout(0), which Node rounds up to 1 ms: every statement waited a millisecond for
  // nothing (1.2 ms against 0.09 ms per prepared select through the proxy; bench/micro/
  // node-driver.ts). workerd runs a zero timer at once, so the hub keeps the default there.
  config.coalesceWrites = false;
  if (proxyUrl !== undefined) {
    config.wsProxy = () => `${proxyUrl}/v1`;
    config.useSecureWebSocket = false;
    config.pipelineTLS = false;
    config.pipelineConnect = false;
  }
  return client;
}

/** Neon is reached over its own secure WebSocket endpoint, not through our plain-TCP proxy. */
export function isNeonUrl(databaseUrl: string): boolean {
  try {
    return new URL(databaseUrl).hostname.endsWith('.neon.tech');
  } catch {
    return false;
  }
}

/** Resolves to null when a TCP connection to host:port opens within `timeoutMs`, else the error. */
export function probeTcp(host: string, port: number, timeoutMs: number): Promise<Error | null> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (result: Error | null) => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(timeoutMs, () => done(new Error(`no answer within ${timeoutMs} ms`)));
    socket.once('connect', () => done(null));
    socket.once('error', (err) => done(err));
  });
}

/** Connects, runs `fn`, and always closes the connection (which sends Terminate). */
export async function withPg<T>(
  databaseUrl: string,
  proxyUrl: string | undefined,
  fn: (client: Client) => Promise<T>,
  options: PgNodeOptions = {},
): Promise<T> {
  const client = pgClient(databaseUrl, proxyUrl, options);
  // An 'error' event without a listener would crash the process (e.g. the server going away
  // between queries); the failing query rejects on its own.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    void client.end().catch(() => undefined);
    throw err;
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** `{ host, port }` of a postgres:// URL, for pinning a proxy to it. */
export function pgTarget(databaseUrl: string): { host: string; port: number } {
  const url = new URL(databaseUrl);
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new Error(`not a postgres:// URL: ${redactUrl(databaseUrl)}`);
  }
  // An IPv6 literal's hostname keeps its brackets ([::1]), which no socket connect resolves.
  const host = url.hostname.startsWith('[') && url.hostname.endsWith(']') ? url.hostname.slice(1, -1) : url.hostname;
  return { host: host || '127.0.0.1', port: url.port ? Number(url.port) : 5432 };
}

/** The URL with its password masked, for messages. */
export function redactUrl(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '<unparseable URL>';
  }
}

/** The same server, another database. */
export function withDatabase(databaseUrl: string, database: string): string {
  const url = new URL(databaseUrl);
  url.pathname = `/${database}`;
  return url.toString();
}
