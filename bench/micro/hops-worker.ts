/**
 * The hops of a desired change inside local workerd, each on its own (bench/micro/workerd-hops.ts
 * drives it): the Worker's request entry, an RPC to a Durable Object, a frame sent from an object
 * to a WebSocket client with and without a SQLite write in the same turn, and the same through two
 * objects (Worker → gateway-like object → session-like object), as the hub's path goes. Also a
 * Postgres statement through the Neon driver from an object, with the driver's write coalescing
 * on (the hub's setting) and off, and the cost of zero timers (which that coalescing waits on).
 */
import { DurableObject } from 'cloudflare:workers';
import { Client, neonConfig } from '@neondatabase/serverless';

interface Env {
  RELAY: DurableObjectNamespace<Relay>;
  SESSION: DurableObjectNamespace<Session>;
  PROXY: string;
  DATABASE_URL: string;
}

const ROW = 'x'.repeat(300);

/** Holds the client's socket, as a session object does (hibernatable), and sends frames to it. */
export class Session extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec('create table if not exists buffer (k integer primary key, v text not null)');
  }

  override async fetch(): Promise<Response> {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  send(n: number, store: boolean): number {
    // As the replay buffer: a row written in the same turn holds the frame until it is committed.
    if (store) this.ctx.storage.sql.exec('insert into buffer (k, v) values (?, ?) on conflict (k) do update set v = excluded.v', n % 1000, ROW);
    for (const ws of this.ctx.getWebSockets()) ws.send(String(n));
    return n;
  }
}

/** Stands for the gateway: answers an RPC, or passes it on to the session, or runs a statement. */
export class Relay extends DurableObject<Env> {
  private clients = new Map<boolean, Client>();

  ping(n: number): number {
    return n + 1;
  }

  relay(n: number, store: boolean): number {
    // As the gateway's poke: sent, not awaited.
    void this.env.SESSION.get(this.env.SESSION.idFromName('s')).send(n, store);
    return n;
  }

  async statements(coalesceWrites: boolean, n: number): Promise<{ msPerStatement: number }> {
    let c = this.clients.get(coalesceWrites);
    if (!c) {
      neonConfig.wsProxy = () => `${this.env.PROXY}/v1`;
      neonConfig.useSecureWebSocket = false;
      neonConfig.pipelineTLS = false;
      neonConfig.pipelineConnect = false;
      neonConfig.coalesceWrites = coalesceWrites;
      c = new Client({ connectionString: this.env.DATABASE_URL });
      await c.connect();
      await c.query('create temporary table hops (k int primary key, revision bigint not null)');
      this.clients.set(coalesceWrites, c);
    }
    // workerd's clock stands still while code runs and moves at I/O: over n statements in a row
    // the total is exact enough.
    const t0 = Date.now();
    for (let i = 0; i < n; i++) {
      await c.query({ name: 'hops_upsert', text: 'insert into hops (k, revision) values ($1, 1) on conflict (k) do update set revision = hops.revision + 1', values: [i % 100] });
    }
    return { msPerStatement: (Date.now() - t0) / n };
  }
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get('n') ?? 0);
    const store = url.searchParams.get('store') === '1';
    switch (url.pathname) {
      case '/ws':
        return env.SESSION.get(env.SESSION.idFromName('s')).fetch(request);
      case '/nothing':
        return new Response('ok');
      case '/rpc':
        return new Response(String(await env.RELAY.get(env.RELAY.idFromName('r')).ping(n)));
      case '/send':
        return new Response(String(await env.SESSION.get(env.SESSION.idFromName('s')).send(n, store)));
      case '/relay':
        return new Response(String(await env.RELAY.get(env.RELAY.idFromName('r')).relay(n, store)));
      case '/timers': {
        for (let i = 0; i < n; i++) await new Promise((resolve) => setTimeout(resolve, 0));
        return new Response('ok');
      }
      case '/statements':
        return Response.json(await env.RELAY.get(env.RELAY.idFromName('r')).statements(url.searchParams.get('coalesce') === '1', n));
    }
    return new Response('not found', { status: 404 });
  },
};
