/**
 * The upgrade of a fresh connection writes nothing to its new session object: no tables, no
 * alarm. Every write there is a commit the 101 waits for (a disk sync locally, a replicated write
 * in a deployment); the hello's commit carries the tables and the alarm instead. The handshake
 * deadline, now an in-memory timer until the hello, still holds (handshake.test.ts, and at the
 * real 10 s in test/hub/handshake-quiet.test.ts). A connection to a session that exists (a
 * resume) is upgraded without a write too: its handshake deadline is the same timer, and the
 * alarm stays where the session's own deadlines put it.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { CloseCode, newId } from '../../src/protocol';
import { SessionSql } from '../../src/hub/session/schema';
import { connect, hubEnv, newCluster } from './support/peer';

const OURS = ['meta', 'replay', 'wakes', 'sent_desired', 'owed'];

/** A connection routed to a known new object: a resume hint names its route key (nothing to resume there). */
async function connectToNew(token: string, clusterUid: string) {
  const routeKey = newId();
  const peer = await connect(token, `${routeKey}.${newId()}`);
  return { peer, stub: sessionStub(hubEnv, { clusterUid, routeKey }) };
}

function tablesOf(state: DurableObjectState): string[] {
  return state.storage.sql
    .exec<{ name: string }>("select name from sqlite_master where type = 'table'")
    .toArray()
    .map((r) => r.name)
    .filter((n) => OURS.includes(n))
    .sort();
}

function inspect(stub: DurableObjectStub) {
  return runInDurableObject(stub, async (_instance, state) => ({
    tables: tablesOf(state),
    alarm: await state.storage.getAlarm(),
    wakes: tablesOf(state).includes('wakes')
      ? (JSON.parse(state.storage.sql.exec<{ doc: string }>('select doc from wakes').toArray()[0]?.doc ?? 'null') as { byKind: Record<string, number> } | null)
      : null,
  }));
}

describe('a fresh connection (spec: Connection lifecycle)', () => {
  it("is upgraded without writing its session object; the hello's commit writes the tables, the alarm and the wake counts", async () => {
    const c = await newCluster();
    const { peer, stub } = await connectToNew(c.token, c.uid);
    expect(await inspect(stub)).toEqual({ tables: [], alarm: null, wakes: null });

    const welcome = await peer.hello({ cluster_id: c.name });
    expect(welcome.type).toBe('welcome');
    const after = await inspect(stub);
    expect(after.tables).toEqual([...OURS].sort());
    expect(after.alarm).toEqual(expect.any(Number));
    // The wake counts rode on the hello's commit, not on one of their own a second later.
    expect(after.wakes?.byKind).toMatchObject({ fetch: 1, message: 1 });
    peer.close();
  });
});

describe('a connection to a session that exists (spec: Connection lifecycle, resume)', () => {
  it('is upgraded without a storage write (the alarm stays where it was), and is still closed 4408 at its handshake deadline', async () => {
    const c = await newCluster();
    const first = await connect(c.token);
    const sessionId = String((await first.hello({ cluster_id: c.name })).payload.session_id);
    await first.next((f) => f.type === 'stream.end');
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(sessionId) as string });
    const alarm = () => runInDurableObject(stub, (_instance, state) => state.storage.getAlarm());
    // Settled: the welcome's and the resync's writes are in; the first connection stays silent.
    await new Promise((r) => setTimeout(r, 300));
    const before = await alarm();
    expect(before).toEqual(expect.any(Number));

    const second = await connect(c.token, sessionId);
    const opened = Date.now();
    // Before the change the upgrade moved the alarm up to this connection's handshake deadline.
    expect(await alarm()).toBe(before);
    const { HANDSHAKE_TIMEOUT_MS } = hubConfig(hubEnv);
    expect((await second.closedWith(HANDSHAKE_TIMEOUT_MS + 5_000)).code).toBe(CloseCode.TIMEOUT);
    expect(Date.now() - opened).toBeGreaterThanOrEqual(HANDSHAKE_TIMEOUT_MS - 100);
    first.close();
  });
});

describe("a fresh session's resync", () => {
  it("is numbered and written with the welcome in one pass (one replay write, so one commit), not a frame ahead of the rest", async () => {
    const c = await newCluster();
    const { peer, stub } = await connectToNew(c.token, c.uid);
    // Count the replay buffer's writes from inside the object, before the hello reaches it.
    await runInDurableObject(stub, (instance) => {
      const replay = (instance as unknown as { state: { store: { replay: { flush(): void } } } }).state.store.replay;
      const flush = replay.flush.bind(replay);
      const counts = ((globalThis as { replayWrites?: number[] }).replayWrites = [] as number[]);
      replay.flush = function (this: { pending: unknown[] }) {
        if (this.pending.length > 0) counts.push(this.pending.length);
        flush();
      };
    });
    await peer.hello({ cluster_id: c.name });
    expect((await peer.next((f) => f.type === 'stream.end')).payload).toEqual({ complete: true, count: 0 });
    // resync.begin and stream.end (the cluster has no deployments) in one statement.
    expect((globalThis as { replayWrites?: number[] }).replayWrites).toEqual([2]);
    peer.close();
  });
});

describe('SessionSql', () => {
  it('reads an object with an older schema as written (not fresh) and adds the missing tables at its next write', async () => {
    const id = hubEnv.SESSIONS.newUniqueId();
    const out = await runInDurableObject(hubEnv.SESSIONS.get(id), async (_instance, state) => {
      const raw = state.storage.sql;
      raw.exec('create table meta (k integer primary key check (k = 1), doc text not null)');
      raw.exec("insert into meta (k, doc) values (1, '{}')");
      const sql = new SessionSql(raw);
      const fresh = sql.fresh;
      sql.exec("insert into wakes (k, doc) values (1, '{}')");
      const tables = raw.exec<{ name: string }>("select name from sqlite_master where type = 'table'").toArray().map((r) => r.name);
      return { fresh, tables: tables.filter((n) => OURS.includes(n)).sort(), meta: raw.exec<{ doc: string }>('select doc from meta').one().doc };
    });
    expect(out).toEqual({ fresh: false, tables: [...OURS].sort(), meta: '{}' });
  });
});
