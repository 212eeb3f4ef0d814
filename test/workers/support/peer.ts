/** The workerd side of the test peer: connect through the Worker in-process. */
import { env, exports } from 'cloudflare:workers';
import type { HubEnv } from '../../../src/hub/env';
import { Pg } from '../../../src/hub/pg';
import { Peer, uniqueName } from '../../support/peer-core';

export { desired, eventually, node, Peer, sleep, type Closed, type Frame } from '../../support/peer-core';

export const hubEnv = env as unknown as HubEnv;
export const worker = (exports as unknown as { default: Fetcher }).default;
const ADMIN = { authorization: `Bearer ${hubEnv.ADMIN_TOKEN}`, 'content-type': 'application/json' };

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

export async function newCluster(prefix = 'c'): Promise<TestCluster> {
  const r = await admin('POST', '/clusters', { name: uniqueName(prefix) });
  if (r.status !== 201) throw new Error(`create cluster: ${r.status} ${JSON.stringify(r.json)}`);
  return { uid: r.json.uid, name: r.json.name, token: r.json.enrollment_token };
}

export async function sql<R = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<R[]> {
  const pg = new Pg(hubEnv, { idleCloseMs: 0 });
  try {
    return (await pg.query<R>(text, params)).rows;
  } finally {
    await pg.close();
  }
}

/**
 * Connect through the Worker. Note: vitest-pool-workers routes every handler call of a Durable
 * Object through an async module import, which can reorder a burst of messages; bursts of frames
 * belong in the Node-driven suite (test/hub), where ordering is the real transport's.
 */
export async function connect(token: string, hint?: string | null): Promise<Peer> {
  return connectVia((req) => worker.fetch(req), token, hint);
}

/** Connect through any fetch of the hub (e.g. the app called with an instrumented env). */
export async function connectVia(fetchHub: (req: Request) => Promise<Response>, token: string, hint?: string | null): Promise<Peer> {
  const res = await fetchHub(
    new Request('http://hub.test/v1/connect', {
      headers: { upgrade: 'websocket', authorization: `Bearer ${token}`, ...(hint ? { 'wingsmith-session': hint } : {}) },
    }),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`connect: HTTP ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  ws.accept();
  return new Peer({
    send: (t) => ws.send(t),
    close: (code, reason) => ws.close(code, reason),
    onMessage: (fn) => ws.addEventListener('message', (e) => fn(String(e.data))),
    onClose: (fn) => ws.addEventListener('close', (e) => fn({ code: e.code, reason: e.reason })),
  });
}

/**
 * Run `body` with a trigger on the cluster's owner row (`before insert or update`, for the rows
 * where `new.cluster_uid` is this cluster's and `when` holds): `plpgsql` is its body. It holds or
 * fails a claim, whose statement inserts the row (a cluster's first) or updates it.
 */
export async function withOwnerTrigger<T>(uid: string, tag: string, plpgsql: string, when: string, body: () => Promise<T>): Promise<T> {
  if (!/^[0-9A-Za-z_-]+$/.test(uid)) throw new Error('uid');
  const name = `wingsmith_test_${tag}_${uid.toLowerCase()}`;
  await sql(`create function ${name}() returns trigger language plpgsql as $$ begin ${plpgsql} end $$`);
  await sql(`create trigger ${name} before insert or update on cluster_owners for each row when (new.cluster_uid = '${uid}'${when}) execute function ${name}()`);
  try {
    return await body();
  } finally {
    await sql(`drop trigger if exists ${name} on cluster_owners`);
    await sql(`drop function if exists ${name}()`);
  }
}
