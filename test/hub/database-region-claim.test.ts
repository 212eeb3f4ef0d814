/**
 * A region's database belongs to that region (DESIGN decision 11: "A region is a wrangler
 * environment with its own route, database and secrets"). Two regions given the same DATABASE_URL
 * by mistake served each other's clusters: a token registered in one region was welcomed through
 * the other's route, its session kept in the other's Durable Object jurisdiction (an EU cluster's
 * state leaving the EU). Now the first hub to reach a database claims it for its region (migration
 * 0025), and a hub of another region answers every request 503 unconfigured, naming DATABASE_URL
 * and the region the database belongs to. A database error while the region is read is no such
 * answer: the request is answered as before, and the region read again.
 *
 * Real workerd (wrangler's dev server, the default deployment and [env.eu] with its jurisdiction
 * emulated, as `HUB_REGION=eu npm start` runs it), real Postgres.
 */
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { copyDatabase } from '../../scripts/lib/dev-stack';
import { pgClient } from '../../scripts/lib/pg-node';
import { startPgWsProxy, type PgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { startHub, type Hub } from '../e2e/support/worker';
import { Peer, uniqueName } from '../support/peer-core';
import { FAST_TIMERS, sleep } from './support/hub';
import { captureHubLines } from './support/hub-lines';
import { findProxyTarget } from './support/proxy-target';

// The embedded Postgres is one database shared by every file (and every region's hub): a real
// server gives each hub here a database of its own making.
const EMBEDDED = inject('embeddedPostgres');
const EU = { ...FAST_TIMERS, HUB_JURISDICTION_EMULATION: '1' };
const lines = captureHubLines();

async function admin(hub: Hub, method: string, p: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${hub.url}/admin${p}`, {
    method,
    headers: { authorization: `Bearer ${hub.adminToken}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function healthz(hub: Hub): Promise<{ status: number; json: any }> {
  const res = await fetch(`${hub.url}/healthz`);
  return { status: res.status, json: await res.json() };
}

/** The connect route's answer: the welcome (or refusal frame) of an upgraded socket, or the HTTP answer that refused the upgrade. */
async function connectAnswer(hub: Hub, token: string, clusterName: string): Promise<{ status: number; json?: any; frame?: any }> {
  const ws = new WebSocket(`${hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
  const opened = await new Promise<{ status: number; json?: any } | null>((resolve, reject) => {
    ws.once('open', () => resolve(null));
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += String(d)));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : null }));
    });
    ws.once('error', reject);
  });
  if (opened) return opened;
  const peer = new Peer({
    send: (t) => ws.send(t),
    close: (code, reason) => ws.close(code, reason),
    onMessage: (fn) => ws.on('message', (d) => fn(String(d))),
    onClose: (fn) => ws.on('close', (code, reason) => fn({ code, reason: String(reason) })),
  });
  try {
    const frame = await peer.hello({ cluster_id: clusterName });
    return { status: 101, frame };
  } finally {
    peer.close();
  }
}

describe.skipIf(EMBEDDED)("a hub refuses another region's database", () => {
  let first: Hub | null = null;
  let eu: Hub | null = null;
  let cluster: { name: string; token: string };

  beforeAll(async () => {
    // The default deployment reaches the database first: it is the default deployment's.
    first = await startHub({ vars: { ...FAST_TIMERS } });
    const reg = await admin(first, 'POST', '/clusters', { name: uniqueName('home') });
    expect(reg.status, JSON.stringify(reg.json)).toBe(201);
    cluster = { name: reg.json.name, token: reg.json.enrollment_token };
    // The eu region, its DATABASE_URL pasted from the default deployment's.
    eu = await startHub({ env: 'eu', vars: { ...EU } });
  }, 120_000);
  afterAll(async () => {
    await eu?.stop();
    await first?.stop();
  }, 60_000);

  const unconfigured = {
    error: { code: 'unconfigured', field: 'DATABASE_URL', message: expect.stringContaining('this is the database of region (default), and this deployment serves region eu') },
  };

  it('/healthz answers 503 unconfigured, naming DATABASE_URL and the region the database belongs to', async () => {
    expect(await healthz(eu!)).toEqual({ status: 503, json: unconfigured });
  });

  it("the connect route refuses the other region's token before any session: 503 unconfigured, no welcome", async () => {
    expect(await connectAnswer(eu!, cluster.token, cluster.name)).toEqual({ status: 503, json: unconfigured });
  });

  it("the admin API serves none of the other region's clusters, and registers none in its database", async () => {
    expect(await admin(eu!, 'GET', `/clusters/${cluster.name}`)).toEqual({ status: 503, json: unconfigured });
    expect(await admin(eu!, 'GET', '/clusters')).toEqual({ status: 503, json: unconfigured });
    const name = uniqueName('stray');
    expect(await admin(eu!, 'POST', '/clusters', { name })).toEqual({ status: 503, json: unconfigured });
    expect((await admin(first!, 'GET', `/clusters/${name}`)).status).toBe(404);
  });

  it('says so in one error line, however many requests it refuses', async () => {
    await sleep(300);
    const refusals = lines.filter((l) => l.component === 'config' && l.variable === 'DATABASE_URL');
    expect(refusals).toEqual([expect.objectContaining({ level: 'error', error: expect.stringContaining('this is the database of region (default)') })]);
  });

  it('the region whose database it is serves it as before: its cluster, its token, its readiness', async () => {
    expect(await healthz(first!)).toEqual({ status: 200, json: { ok: true, database: 'ok', schema: 'ok', region: null } });
    expect((await admin(first!, 'GET', `/clusters/${cluster.name}`)).json).toMatchObject({ name: cluster.name, region: null });
    const answer = await connectAnswer(first!, cluster.token, cluster.name);
    expect(answer).toMatchObject({ status: 101, frame: { type: 'welcome' } });
  });
});

describe.skipIf(EMBEDDED)('a database error while the region is read', () => {
  let proxy: PgWsProxy | null = null;
  let port = 0;
  let target = { host: '127.0.0.1', port: 5432 };
  let hub: Hub | null = null;
  let url = '';
  const proxyUp = async () => {
    if (proxy) return;
    proxy = await startPgWsProxy({ target, port });
    port = proxy.port;
  };
  const proxyDown = async () => {
    await proxy?.close();
    proxy = null;
  };

  beforeAll(async () => {
    // A database of the eu region's own, already claimed by it (as a hub of it that ran before).
    url = await copyDatabase(inject('databaseUrl'), inject('pgWsProxy'), inject('databaseTemplate')!);
    target = await findProxyTarget(inject('databaseUrl'), inject('pgWsProxy'));
    const c = pgClient(url, inject('pgWsProxy'));
    await c.connect();
    try {
      await c.query(`insert into hub_region (region) values ('eu')`);
    } finally {
      await c.end();
    }
    await proxyUp();
    hub = await startHub({ env: 'eu', vars: { ...EU, DATABASE_URL: url, PG_WS_PROXY: `127.0.0.1:${port}` } });
  }, 120_000);
  afterAll(async () => {
    await hub?.stop();
    await proxyDown();
  }, 60_000);

  it('a connect without an enrollment token is refused 401 before the region is read: a stalled database does not hold it', async () => {
    // The isolate's first request: the region is still to be read, and its table is locked.
    const mark = lines.length;
    const locker = pgClient(url, inject('pgWsProxy'));
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table hub_region in access exclusive mode');
      const res = await fetch(`${hub!.url}/v1/connect`, { headers: { authorization: 'Bearer not-a-token' } });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
      const waiting = await locker.query(`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%hub_region%' and pid <> pg_backend_pid() and datname = current_database()`);
      expect(waiting.rows[0].n).toBe(0);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    await sleep(300);
    expect(lines.slice(mark).filter((l) => l.component === 'db-region')).toEqual([]);
  });

  it('is answered as the outage it is, not as a mismatch, and not kept: once the database is back the hub serves', async () => {
    // The hub's first requests, with Postgres cut at the network.
    await proxyDown();
    try {
      expect(await healthz(hub!)).toEqual({ status: 503, json: { ok: false, database: 'unavailable', region: 'eu' } });
      const list = await admin(hub!, 'GET', '/clusters');
      expect(list).toMatchObject({ status: 503, json: { error: { code: 'unavailable' } } });
    } finally {
      await proxyUp();
    }
    expect(await healthz(hub!)).toEqual({ status: 200, json: { ok: true, database: 'ok', schema: 'ok', region: 'eu' } });
    const reg = await admin(hub!, 'POST', '/clusters', { name: uniqueName('back') });
    expect(reg.status, JSON.stringify(reg.json)).toBe(201);
    expect(await connectAnswer(hub!, reg.json.enrollment_token, reg.json.name)).toMatchObject({ status: 101, frame: { type: 'welcome' } });
  });
});
