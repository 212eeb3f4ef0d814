/**
 * Operators bring their own Postgres, where a DBA may set database defaults the hub does not
 * choose. The driver's timestamptz parser reads only ISO output (DateStyle ISO); under any other
 * DateStyle ('SQL, DMY', 'German', 'Postgres') it answers null, which `new Date(null)` turns into
 * 1970. Times the hub reads must not depend on the session's DateStyle or TimeZone: an operation
 * sent with a deadline in 1970 is past its deadline on arrival, and a disabled cluster shown with
 * `disabled: false` is a lie to the operator of the plane.
 */
import { describe, expect, inject, it } from 'vitest';
import { FAST_TIMERS, useHub } from './support/hub';

const EMBEDDED = inject('embeddedPostgres');

// Set on this file's own database before the hub starts (every connection of the hub's then has
// it). The embedded Postgres is one database shared by every file: left alone there.
const h = useHub({ ...FAST_TIMERS }, async () => {
  if (!EMBEDDED) {
    const db = (await h.sql<{ db: string }>('select current_database() as db'))[0]?.db;
    await h.sql(`alter database "${db}" set datestyle = 'SQL, DMY'`);
    await h.sql(`alter database "${db}" set timezone = 'Pacific/Chatham'`);
  }
  return {};
});

/** An ISO time within a minute of now plus `aheadS`. */
function near(at: unknown, aheadS = 0): void {
  expect(typeof at).toBe('string');
  expect(Math.abs(Date.parse(at as string) - (Date.now() + aheadS * 1000)), `${String(at)}: ms off now + ${aheadS} s`).toBeLessThan(60_000);
}

describe.skipIf(EMBEDDED)("under a database's DateStyle 'SQL, DMY' and TimeZone 'Pacific/Chatham'", () => {
  it('the hub connects with those settings (the premise of this file)', async () => {
    const probe = await h.sql<{ d: string }>('select current_setting(\'datestyle\') as d');
    expect(probe[0]?.d).toBe('SQL, DMY');
  });

  it("sends operation.start with the operation's real deadline, not 1970", async () => {
    const c = await h.newCluster('pgds');
    const { peer } = await h.openFresh(c);
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === r.json.operation_id);
    near(sf.payload.deadline, 300);
    near((await h.admin('GET', `/operations/${r.json.operation_id}`)).json.deadline, 300);
    peer.close();
  });

  it('sends an open operation in the snapshot of a fresh session with its real deadline', async () => {
    const c = await h.newCluster('pgdss');
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-2', params: {}, deadline_s: 600 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === r.json.operation_id);
    near(sf.payload.deadline, 600);
    peer.close();
  });

  it("a disable answers and reads disabled with its time, and a cluster's times are its own", async () => {
    const c = await h.newCluster('pgdc');
    const off = await h.admin('POST', `/clusters/${c.name}/disable`);
    expect(off.status).toBe(200);
    expect(off.json.disabled, 'the disable answers disabled').toBe(true);
    near(off.json.disabled_at);
    const view = (await h.admin('GET', `/clusters/${c.name}`)).json;
    expect(view.disabled, 'the cluster reads disabled').toBe(true);
    near(view.disabled_at);
    near(view.created_at);
    near(view.token_issued_at);
    const list = (await h.admin('GET', '/clusters')).json;
    const item = list.items.find((x: { uid: string }) => x.uid === c.uid);
    expect(item.disabled).toBe(true);
    near(item.created_at);
  });
});
