/**
 * The eu deployment (wrangler.toml [env.eu], run by the `workers-eu` project) keeps every object
 * in the eu jurisdiction, and an object outside it serves nothing.
 *
 * What local workerd shows and what only Cloudflare shows: workerd has no jurisdictions
 * (`ns.jurisdiction()` throws "not implemented in workerd"), so these tests run the emulation
 * `npm start` uses (src/hub/region.ts): the object's id carries the jurisdiction in its name and
 * the object reads it back from its own `ctx.id`. On Cloudflare the same code takes the real
 * restricted namespace and reads the platform's `ctx.id.jurisdiction`; that the object then
 * actually runs and stores only in the EU is the platform's guarantee, observable only there.
 */
import { listDurableObjectIds, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { INTERNAL_HEADERS, gatewayStub, routeKeyOf, sessionObjectName, sessionStub } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { jurisdictionOf } from '../../src/hub/region';
import type { SessionObject } from '../../src/hub/session/session-object';
import { CloseCode, newId } from '../../src/protocol';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { admin, connect, hubEnv, newCluster, worker } from '../workers/support/peer';

const cfg = hubConfig(hubEnv);
const ids = (list: DurableObjectId[]) => list.map((id) => id.toString()).sort();

/** A session object's name through the unrestricted namespace: what a lookup that bypassed address.ts would reach. */
const misplacedSession = (clusterUid: string) =>
  hubEnv.SESSIONS.get(hubEnv.SESSIONS.idFromName(sessionObjectName(clusterUid, newId()))) as DurableObjectStub<SessionObject>;

/** The tables in an object's SQLite, apart from the runtime's own. */
const tablesOf = (stub: DurableObjectStub<SessionObject>) =>
  runInDurableObject(stub, (_i, s) =>
    s.storage.sql
      .exec<{ name: string }>("select name from sqlite_master where type = 'table'")
      .toArray()
      .map((r) => r.name)
      .filter((n) => !n.startsWith('_cf')),
  );

/** A session's storage as an object created before the jurisdiction was added keeps it: a record, a replay buffer, an alarm. */
async function storeSession(storage: DurableObjectStorage): Promise<void> {
  storage.sql.exec('create table meta (session_id text)');
  storage.sql.exec("insert into meta values ('s')");
  storage.sql.exec('create table replay (frame text)');
  storage.sql.exec(`insert into replay values ('{"type":"deployment.desired","payload":{"env":{"SECRET":"x"}}}')`);
  await storage.setAlarm(Date.now() + 60_000);
}

/** The RESIDENCY error lines logged while `run` ran. */
async function residencyLogs(run: () => Promise<unknown>): Promise<{ entry: string; reason: string }[]> {
  const spy = vi.spyOn(console, 'error');
  try {
    await run();
    return spy.mock.calls
      .map((args) => String(args[0]))
      .filter((line) => line.includes('RESIDENCY'))
      .map((line) => JSON.parse(line) as { entry: string; reason: string });
  } finally {
    spy.mockRestore();
  }
}

describe('the eu deployment (wrangler.toml [env.eu])', () => {
  it('/healthz names the region (README, Deploying in several regions)', async () => {
    const res = await worker.fetch('http://hub.test/healthz');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true, database: 'ok', schema: 'ok', region: 'eu' });
  });

  it('runs with the eu environment\'s configuration', () => {
    expect(cfg.HUB_REGION).toBe('eu');
    expect(cfg.HUB_JURISDICTION).toBe('eu');
  });

  it('creates every session object and every gateway shard in the eu jurisdiction, and the object reads eu from its own id', async () => {
    const before = ids(await listDurableObjectIds(hubEnv.SESSIONS));
    const c = await newCluster('eu');
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    expect(welcome.payload.region).toBe('eu');
    peer.close();

    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(welcome.payload.session_id as string) as string });
    // The one object this connect created is the one the regional namespace names.
    const created = ids(await listDurableObjectIds(hubEnv.SESSIONS)).filter((id) => !before.includes(id));
    expect(created).toEqual([stub.id.toString()]);
    const seen = await runInDurableObject(stub, (_instance, state) => ({
      platform: state.id.jurisdiction ?? null,
      resolved: jurisdictionOf(state.id, cfg),
    }));
    expect(seen.resolved).toBe('eu');
    // Locally the platform reports none (workerd has no jurisdictions); on Cloudflare this is 'eu'.
    expect(seen.platform).toBeNull();

    // The gateway shards that served the admission, the claim and the admin calls: all regional.
    const shards = Array.from({ length: cfg.DB_GATEWAY_SHARDS }, (_, i) => gatewayStub(hubEnv, i));
    const gateways = ids(await listDurableObjectIds(hubEnv.DB_GATEWAY));
    expect(gateways.length).toBeGreaterThan(0);
    for (const id of gateways) {
      const shard = shards.find((s) => s.id.toString() === id);
      expect(shard, `gateway object ${id} is not a regional shard`).toBeDefined();
      expect(await runInDurableObject(shard as DurableObjectStub, (_i, state) => jurisdictionOf(state.id, cfg))).toBe('eu');
    }
  });

  it('a session object outside the jurisdiction refuses to serve a connect, and keeps no session', async () => {
    const c = await newCluster('eu');
    const misplaced = misplacedSession(c.uid);
    const res = await misplaced.fetch('https://session.internal/connect', {
      headers: {
        upgrade: 'websocket',
        [INTERNAL_HEADERS.clusterUid]: c.uid,
        [INTERNAL_HEADERS.clusterName]: c.name,
        [INTERNAL_HEADERS.tokenHash]: '00',
        [INTERNAL_HEADERS.routeKey]: newId(),
      },
    });
    expect(res.status).toBe(500);
    expect(res.webSocket).toBeNull();
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('internal');
    expect(body.error.message).toMatch(/residency check failed: .*region eu keeps its objects in eu/);
    const state = await runInDurableObject(misplaced, (_i, s) => s.getWebSockets().length);
    expect(state).toBe(0);
  });

  it('a session object outside the jurisdiction refuses every RPC (poke, check, status, wakeStats) and writes nothing to its storage', async () => {
    const c = await newCluster('eu');
    const misplaced = misplacedSession(c.uid);
    const refused = /residency check failed: .*region eu keeps its objects in eu/;
    // What each call was refused with (null: it was served). An RPC promise is callable, so not `rejects`.
    const refusal = (p: Promise<unknown>) => p.then(() => null, (err: Error) => err.message);
    const logs = await residencyLogs(async () => {
      expect(await refusal(misplaced.poke(1, []))).toMatch(refused);
      expect(await refusal(misplaced.check(newId(), 'sweep'))).toMatch(refused);
      expect(await refusal(misplaced.status())).toMatch(refused);
      expect(await refusal(misplaced.wakeStats())).toMatch(refused);
    });
    expect(logs.map((l) => l.entry)).toEqual(['poke', 'check', 'status', 'wakeStats']);
    // Not even the schema or the wake counter: the constructor stopped at the gate.
    expect(await tablesOf(misplaced)).toEqual([]);
  });

  it('a session object outside the jurisdiction serves nothing at its alarm: it logs, deletes its storage and does not set the alarm again', async () => {
    const c = await newCluster('eu');
    const misplaced = misplacedSession(c.uid);
    // What an object created before the region had its jurisdiction holds: a session and the alarm for its retention.
    await runInDurableObject(misplaced, (_i, s) => storeSession(s.storage));
    const logs = await residencyLogs(async () => expect(await runDurableObjectAlarm(misplaced)).toBe(true));
    expect(logs).toEqual([expect.objectContaining({ entry: 'alarm', reason: expect.stringMatching(/region eu keeps its objects in eu/) })]);
    expect(await runInDurableObject(misplaced, (_i, s) => s.storage.getAlarm())).toBeNull();
    expect(await tablesOf(misplaced)).toEqual([]);
  });

  it('a session object outside the jurisdiction woken by an RPC deletes its storage and its alarm too', async () => {
    const c = await newCluster('eu');
    const misplaced = misplacedSession(c.uid);
    await runInDurableObject(misplaced, (_i, s) => storeSession(s.storage));
    await misplaced.poke(1, []).then(
      () => expect.unreachable('a misplaced object served a poke'),
      (err: Error) => expect(err.message).toMatch(/residency check failed/),
    );
    expect(await runInDurableObject(misplaced, (_i, s) => s.storage.getAlarm())).toBeNull();
    expect(await tablesOf(misplaced)).toEqual([]);
  });

  it('a gateway shard outside the jurisdiction relays no statement', async () => {
    const misplaced = hubEnv.DB_GATEWAY.get(hubEnv.DB_GATEWAY.idFromName('shard-0')) as unknown as {
      query(text: string, params: unknown[]): Promise<{ ok: boolean; name?: string; message?: string }>;
    };
    const r = await misplaced.query('select 1 as ok', []);
    expect(r).toMatchObject({ ok: false, name: 'ResidencyError' });
    expect(r.message).toMatch(/residency check failed/);
  });

  // A session joins the fleet poll by its claim (the shard arms its poll first): refused, a
  // misplaced shard arms nothing and registers nothing.
  it('a gateway shard outside the jurisdiction refuses a claim: typed, and no poll armed', async () => {
    const misplaced = hubEnv.DB_GATEWAY.get(hubEnv.DB_GATEWAY.idFromName('shard-1')) as unknown as {
      claim(args: Record<string, unknown>, rows: number): Promise<{ ok: boolean; name?: string; message?: string }>;
    };
    const r = await misplaced.claim({ clusterUid: 'c-residency', tokenHashHex: '00', freshSessionId: 'x.y', resume: null }, 0);
    expect(r).toMatchObject({ ok: false, name: 'ResidencyError' });
    expect(r.message).toMatch(/residency check failed/);
    expect(await runInDurableObject(hubEnv.DB_GATEWAY.get(hubEnv.DB_GATEWAY.idFromName('shard-1')), (_i, s) => s.storage.getAlarm())).toBeNull();
  });

  it('a gateway shard outside the jurisdiction polls nothing at its alarm: it logs, and deletes its storage and its alarm', async () => {
    const misplaced = hubEnv.DB_GATEWAY.get(hubEnv.DB_GATEWAY.idFromName('shard-2'));
    await runInDurableObject(misplaced, async (_i, s) => {
      s.storage.sql.exec('create table poller (k integer primary key check (k = 1), shard integer not null)');
      s.storage.sql.exec('insert into poller (k, shard) values (1, 2)');
      await s.storage.setAlarm(Date.now() + 60_000);
    });
    const logs = await residencyLogs(() => runDurableObjectAlarm(misplaced));
    expect(logs.map((l) => l.entry)).toContain('alarm');
    const left = await runInDurableObject(misplaced, async (_i, s) => ({
      tables: s.storage.sql.exec<{ name: string }>("select name from sqlite_master where type = 'table'").toArray().map((r) => r.name).filter((n) => !n.startsWith('_cf')),
      alarm: await s.storage.getAlarm(),
    }));
    expect(left).toEqual({ tables: [], alarm: null });
  });

  it('a well-shaped token unknown in this region is refused as today (error, 4403) with a message naming the region', async () => {
    const peer = await connect(generateEnrollmentToken());
    const err = await peer.next();
    expect(err).toMatchObject({
      type: 'error',
      seq: null,
      payload: { code: 'not_found', retryable: false, message: 'enrollment token is not valid in region eu (unknown or rotated)' },
    });
    const closed = await peer.closedWith();
    expect(closed.code).toBe(CloseCode.REFUSED);
    expect(closed.reason).toContain('in region eu');
  });

  it("a disabled cluster's refusal names the region too: after a move, the old region's endpoint is disabled and this is what an operator still dialling it is told", async () => {
    const c = await newCluster('eu-off');
    // Connected before the disable, refused at its hello.
    const early = await connect(c.token);
    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    early.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: null, resume_from: null, lossy: false });
    expect(await early.next()).toMatchObject({ type: 'error', payload: { code: 'conflict', message: 'cluster is disabled in region eu' } });
    expect((await early.closedWith()).code).toBe(CloseCode.REFUSED);
    // Connecting after it, refused at the connect.
    const peer = await connect(c.token);
    expect(await peer.next()).toMatchObject({ type: 'error', seq: null, payload: { code: 'conflict', retryable: false, message: 'cluster is disabled in region eu' } });
    const closed = await peer.closedWith();
    expect(closed.code).toBe(CloseCode.REFUSED);
    expect(closed.reason).toContain('in region eu');
  });

  it('a live session cut by its cluster\'s disable (the old region after a move) or by a token rotation is told the region too', async () => {
    const open = async (c: { token: string; name: string }) => {
      const peer = await connect(c.token);
      peer.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: null, resume_from: null, lossy: false });
      expect(await peer.next()).toMatchObject({ type: 'welcome', payload: { region: 'eu' } });
      return peer;
    };
    const off = await newCluster('eu-live-off');
    const offPeer = await open(off);
    expect((await admin('POST', `/clusters/${off.name}/disable`)).status).toBe(200);
    expect(await offPeer.next((f) => f.type === 'error')).toMatchObject({ payload: { code: 'conflict', message: 'cluster is disabled in region eu' } });
    expect((await offPeer.closedWith()).code).toBe(CloseCode.REFUSED);

    const rot = await newCluster('eu-live-rot');
    const rotPeer = await open(rot);
    expect((await admin('POST', `/clusters/${rot.name}/rotate-token`)).status).toBe(200);
    expect(await rotPeer.next((f) => f.type === 'error')).toMatchObject({ payload: { code: 'not_found', message: 'enrollment token was rotated in region eu' } });
    expect((await rotPeer.closedWith()).code).toBe(CloseCode.REFUSED);
  });

  it('the cluster view names the region and the jurisdiction its session state is kept in', async () => {
    const c = await newCluster('eu');
    const one = await admin('GET', `/clusters/${c.name}`);
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ uid: c.uid, region: 'eu', jurisdiction: 'eu', location_hint: null });
    const list = await admin('GET', '/clusters?limit=500');
    expect(list.json.clusters.find((x: { uid: string }) => x.uid === c.uid)).toMatchObject({ region: 'eu', jurisdiction: 'eu' });
  });
});
