/**
 * The hub in real workerd (wrangler's in-process dev server) driven from Node: raw frames over a
 * real WebSocket, real Postgres. Each test file starts its own hub with the configuration it
 * needs (fast timers, tiny limits, the real defaults).
 */
import { afterAll, afterEach, beforeAll, expect, inject } from 'vitest';
import { fileDatabaseUrl } from '../../support/file-database';
import WebSocket from 'ws';
import { pgClient } from '../../../scripts/lib/pg-node';
import { startHub, type Hub } from '../../e2e/support/worker';
import { desired, Peer, uniqueName } from '../../support/peer-core';

export { desired, device, eventually, node, Peer, sleep, type Closed, type Frame } from '../../support/peer-core';

/** Timers fast enough to exercise every timeout in seconds; the real values have their own file. */
export const FAST_TIMERS = {
  // Not shorter: on the loaded CI machine a hello took over 1.5 s to be answered (a 4408 mid-test).
  HANDSHAKE_TIMEOUT_MS: '3000',
  // Advertised only (the hub does not ping): an idle limit under two ping intervals is refused
  // at startup, since operators ignore it (src/hub/config.ts).
  PING_INTERVAL_MS: '1000',
  IDLE_TIMEOUT_MS: '3000',
  POLL_INTERVAL_MS: '300',
  HOLE_TIMEOUT_MS: '2500',
  RETENTION_MS: '2000',
  PG_QUERY_TIMEOUT_MS: '1500',
};

export interface TestCluster {
  uid: string;
  name: string;
  token: string;
}

export interface HubHandle {
  readonly hub: Hub;
  readonly vars: Record<string, string>;
  admin(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
  newCluster(prefix?: string): Promise<TestCluster>;
  connect(token: string, hint?: string | null): Promise<Peer>;
  /** Connect, hello, and read the hub's (possibly empty) resync stream to its end. */
  openFresh(c: TestCluster): Promise<{ peer: Peer; sessionId: string }>;
  sql<R = Record<string, any>>(text: string, params?: unknown[]): Promise<R[]>;
}

/**
 * Start a hub for this test file (in beforeAll) and stop it afterwards. `prepare` may add vars
 * that only exist once something else has started (e.g. a proxy the test controls).
 */
export function useHub(vars: Record<string, string> = { ...FAST_TIMERS }, prepare?: () => Promise<Record<string, string>>): HubHandle {
  let hub: Hub | null = null;
  const peers: Peer[] = [];
  beforeAll(async () => {
    const extra = prepare ? await prepare() : {};
    Object.assign(vars, extra);
    hub = await startHub({ vars });
  }, 60_000);
  afterEach(() => {
    const bad = peers.flatMap((p) => p.invalid.splice(0));
    expect(bad, 'frames from the hub that are not valid catalog messages').toEqual([]);
  });
  afterAll(async () => {
    for (const p of peers) p.close();
    await hub?.stop();
  }, 60_000);
  const h: HubHandle = {
    get hub() {
      if (!hub) throw new Error('hub not started');
      return hub;
    },
    vars,
    async admin(method, path, body) {
      const res = await fetch(`${h.hub.url}/admin${path}`, {
        method,
        headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, json: text ? JSON.parse(text) : null };
    },
    async newCluster(prefix = 'c') {
      const name = uniqueName(prefix);
      for (let attempt = 0; ; attempt++) {
        const r = await h.admin('POST', '/clusters', { name });
        // 503 `unavailable` is the hub's "surely not applied, retry with backoff" (a 504 is the
        // maybe-applied one): a test hub's first write under a loaded run met it when the
        // database's region read, the isolate's first statement, failed within the test timers'
        // 1.5 s statement deadline (database-region.ts). Retried as a client would, after a pause.
        if (r.status === 503 && r.json?.error?.code === 'unavailable' && attempt < 2) {
          await new Promise((resolve) => setTimeout(resolve, 1_000));
          continue;
        }
        if (r.status !== 201) throw new Error(`create cluster: ${r.status} ${JSON.stringify(r.json)}`);
        return { uid: r.json.uid, name: r.json.name, token: r.json.enrollment_token };
      }
    },
    async connect(token, hint) {
      const peer = await connectTo(h.hub, token, hint);
      peers.push(peer);
      return peer;
    },
    async openFresh(c) {
      const peer = await h.connect(c.token);
      const welcome = await peer.hello({ cluster_id: c.name });
      await peer.next((f) => f.type === 'stream.end');
      return { peer, sessionId: welcome.payload.session_id as string };
    },
    async sql(text, params = []) {
      const client = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
      await client.connect();
      try {
        return (await client.query(text, params)).rows;
      } finally {
        await client.end();
      }
    },
  };
  return h;
}

/** An operator's WebSocket to `hub`'s connect route, upgraded (a refused upgrade throws). */
export async function connectTo(hub: Pick<Hub, 'wsUrl'>, token: string, hint?: string | null): Promise<Peer> {
  const ws = new WebSocket(`${hub.wsUrl}/v1/connect`, {
    headers: { authorization: `Bearer ${token}`, ...(hint ? { 'wingsmith-session': hint } : {}) },
    perMessageDeflate: false,
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => reject(new Error(`connect: HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
  return new Peer({
    send: (t) => ws.send(t),
    close: (code, reason) => ws.close(code, reason),
    onMessage: (fn) => ws.on('message', (d) => fn(String(d))),
    onClose: (fn) => {
      // ws reports 'close' only after the TCP teardown, which local workerd delays ~10 s for a
      // socket the hub closes before it ever received a message. The close frame (code and
      // reason) is what the protocol speaks, so take whichever comes first.
      let done = false;
      const once = (code: number, reason: string) => {
        if (!done) {
          done = true;
          fn({ code, reason });
        }
      };
      const receiver = (ws as unknown as { _receiver?: { on(e: 'conclude', f: (code: number, reason: Buffer) => void): void } })._receiver;
      receiver?.on('conclude', (code, reason) => once(code, String(reason)));
      ws.on('close', (code, reason) => once(code, String(reason)));
    },
  });
}

/**
 * `n` hellos of one cluster at once, each on a connection of its own, not awaited: a burst of
 * claims (an operator reconnecting in a loop, or any holder of its token).
 */
export async function helloBurst(h: HubHandle, c: TestCluster, n: number): Promise<Peer[]> {
  const burst: Peer[] = [];
  for (let i = 0; i < n; i++) {
    const p = await h.connect(c.token);
    p.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    burst.push(p);
  }
  return burst;
}

export function cfgNumber(h: HubHandle, key: keyof typeof FAST_TIMERS | string, fallback: number): number {
  const v = h.vars[key];
  return v === undefined ? fallback : Number(v);
}

/**
 * Hold whatever lock `statement` takes (a row's `for update`, a table lock) in a transaction of its
 * own on the test database, until the returned release rolls it back (or commits it, `end`).
 * Needs a real Postgres server: the embedded one has a single backend, which the held
 * transaction would block.
 */
export async function holdLock(statement: string, params: unknown[] = [], end: 'rollback' | 'commit' = 'rollback'): Promise<() => Promise<void>> {
  const client = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
  await client.connect();
  await client.query('begin');
  await client.query(statement, params);
  return async () => {
    await client.query(end);
    await client.end();
  };
}

/** Statements of this file's database waiting on a lock right now whose text matches `queryLike` (SQL LIKE). */
export async function waitingOnLock(h: HubHandle, queryLike: string): Promise<number> {
  const r = await h.sql<{ n: string }>(
    "select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like $1",
    [queryLike],
  );
  return Number(r[0]?.n);
}

/**
 * A deployment too large to send (over max_frame_bytes once escaped), written straight into
 * Postgres as another writer (or an older hub) could: the admin API refuses such a body.
 */
export async function insertTooLarge(h: HubHandle, uid: string, deploymentId = 'huge'): Promise<void> {
  const env: Record<string, string> = {};
  for (let i = 0; i < 128; i++) env[`E${i}`] = '\u0001'.repeat(4096);
  await h.sql(
    `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
     insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving)
     select uid, $3, 'w', desired_revision, 1, 1, $2::jsonb from rev`,
    [uid, JSON.stringify({ ...desired().serving, env }), deploymentId],
  );
}
