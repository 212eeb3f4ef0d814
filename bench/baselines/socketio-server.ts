/**
 * Baseline: Socket.IO with connection state recovery, the peer a team would otherwise pick for
 * resumable server→client delivery. Websocket transport only, no compression (as the hub's
 * clients). In its own process.
 *
 * - Clients join the room named by `auth.cluster`.
 * - `PUT /clusters/:cluster/deployments/:id` (JSON body) emits `deployment.desired` to the room
 *   and answers 200 — optionally after the same Postgres upsert the hub's admin API does
 *   (`?db=1`), through the same Neon driver and proxy.
 * - `PUT /clusters/:cluster/deployments` with `{deployments: [{deployment_id, ...}]}` emits each one,
 *   optionally (`?db=1`) after the one statement the hub's bulk PUT runs (one revision bump by
 *   their number, one upsert of all rows, one commit).
 * - IPC {type:'emit', room, n, payload, reqId} broadcasts n frames to the room (used while the
 *   client is disconnected, to measure recovery); replies {type:'emitted', reqId}.
 *
 * IPC: sends {type:'ready', port, pid}; exits on {type:'stop'} or when the parent goes away.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Server } from 'socket.io';
import { pgClient } from '../../scripts/lib/pg-node';
import type { Client } from '@neondatabase/serverless';

const databaseUrl = process.env.BENCH_DATABASE_URL;
const proxy = process.env.BENCH_PG_WS_PROXY;
let db: Client | null = null;
let revision = 0;

async function dbClient(): Promise<Client> {
  if (db) return db;
  if (!databaseUrl || !proxy) throw new Error('no database configured');
  const c = pgClient(databaseUrl, proxy);
  c.on('error', () => undefined);
  await c.connect();
  db = c;
  return c;
}

const http = createServer((req, res) => void handle(req, res));
const io = new Server(http, {
  transports: ['websocket'],
  perMessageDeflate: false,
  connectionStateRecovery: { maxDisconnectionDuration: 5 * 60_000, skipMiddlewares: true },
});

io.on('connection', (socket) => {
  const room = String((socket.handshake.auth as { cluster?: string }).cluster ?? 'default');
  if (!socket.recovered) void socket.join(room);
});

interface DesiredBody {
  workload_id: string;
  min_replicas: number;
  max_replicas: number;
  serving: unknown;
}

/** The bulk write: the statement of the hub's `putDesiredDeployments` (src/hub/db/desired-admin.ts). */
async function bulk(cluster: string, items: (DesiredBody & { deployment_id: string })[], withDb: boolean): Promise<number> {
  let first = revision + 1;
  revision += items.length;
  if (withDb) {
    const c = await dbClient();
    // Prepared, as the hub prepares its own: the same write, sent the same way.
    const { rows } = await c.query<{ first_revision: string }>({
      name: 'put_desired_many',
      text: `with input as (
         select * from jsonb_to_recordset($2::jsonb)
           as x(deployment_id text, workload_id text, min_replicas int, max_replicas int, serving jsonb, ord int)
       ),
       rev as (
         update clusters set desired_revision = desired_revision + $3 where uid = $1
         returning uid, desired_revision - $3 as before
       ),
       up as (
         insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted, updated_at)
         select rev.uid, i.deployment_id, i.workload_id, rev.before + i.ord, i.min_replicas, i.max_replicas, i.serving, false, now()
         from input i, rev
         on conflict (cluster_uid, deployment_id) do update set workload_id = excluded.workload_id,
           revision = excluded.revision, min_replicas = excluded.min_replicas, max_replicas = excluded.max_replicas,
           serving = excluded.serving, deleted = false, updated_at = now()
         returning 1
       )
       select rev.before + 1 as first_revision, (select count(*) from up) as written from rev`,
      values: [cluster, JSON.stringify(items.map((d, i) => ({ ...d, ord: i + 1 }))), items.length],
    });
    first = Number(rows[0]?.first_revision ?? first);
  }
  items.forEach((d, i) => io.to(cluster).emit('deployment.desired', { ...d, revision: first + i, deleted: false }));
  return first;
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://x');
  const many = /^\/clusters\/([^/]+)\/deployments$/.exec(url.pathname);
  const m = /^\/clusters\/([^/]+)\/deployments\/([^/]+)$/.exec(url.pathname);
  if (req.method !== 'PUT' || (!m && !many)) {
    res.writeHead(404).end();
    return;
  }
  let body = '';
  for await (const chunk of req) body += String(chunk);
  if (many) {
    try {
      const { deployments } = JSON.parse(body) as { deployments: (DesiredBody & { deployment_id: string })[] };
      const first = await bulk(decodeURIComponent(many[1] as string), deployments, url.searchParams.get('db') === '1');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ first_revision: first }));
    } catch (err) {
      res.writeHead(500).end(String(err));
    }
    return;
  }
  if (!m) return;
  try {
    const cluster = decodeURIComponent(m[1] as string);
    const deploymentId = decodeURIComponent(m[2] as string);
    const d = JSON.parse(body) as DesiredBody;
    let rev = ++revision;
    if (url.searchParams.get('db') === '1') {
      const c = await dbClient();
      // The same write the hub's admin PUT makes: bump the revision, upsert the row; prepared,
      // as the hub's is.
      const { rows } = await c.query<{ revision: string }>({
        name: 'put_desired',
        text: `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
         insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted, updated_at)
         select uid, $2, $3, desired_revision, $4, $5, $6::jsonb, false, now() from rev
         on conflict (cluster_uid, deployment_id) do update set workload_id = excluded.workload_id, revision = excluded.revision,
           min_replicas = excluded.min_replicas, max_replicas = excluded.max_replicas, serving = excluded.serving, deleted = false, updated_at = now()
         returning revision`,
        values: [cluster, deploymentId, d.workload_id, d.min_replicas, d.max_replicas, JSON.stringify(d.serving)],
      });
      rev = Number(rows[0]?.revision ?? rev);
    }
    io.to(cluster).emit('deployment.desired', { deployment_id: deploymentId, revision: rev, ...d, deleted: false });
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ revision: rev }));
  } catch (err) {
    res.writeHead(500).end(String(err));
  }
}

process.on('message', (msg: { type?: string; room?: string; n?: number; payload?: Record<string, unknown>; reqId?: number }) => {
  if (msg?.type === 'stop') {
    void db?.end().catch(() => undefined);
    process.exit(0);
  }
  if (msg?.type === 'emit') {
    const n = msg.n ?? 0;
    for (let i = 0; i < n; i++) io.to(msg.room ?? 'default').emit('deployment.desired', { ...msg.payload, i });
    process.send?.({ type: 'emitted', reqId: msg.reqId });
  }
});
process.on('disconnect', () => process.exit(0));

http.listen(0, '127.0.0.1', () => {
  const a = http.address();
  if (typeof a === 'object' && a) process.send?.({ type: 'ready', port: a.port, pid: process.pid });
});
