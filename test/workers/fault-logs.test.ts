/**
 * A database call that fails for what it says (a missing table: a schema behind the code) is not
 * an outage, and the log says so loudly (level error), while the operator's answer stays the
 * outage's: the ingest ack is withheld and retried, a claim is refused with 1013 (retry), so
 * nothing is lost while the schema is mended. The fault is real Postgres refusing real
 * statements: a trigger, on this cluster's rows only (the project's other files share the
 * database), raises 42P01 as a missing relation does.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { admin, connect, desired, eventually, newCluster, node, sql } from './support/peer';

type Line = { level: string; msg: string; cluster?: string; session?: string; error?: string; first_seq?: number };

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

/** Every JSON line written to `console[level]` from now until the test ends. */
function capture(level: 'warn' | 'error'): () => Line[] {
  const spy = vi.spyOn(console, level);
  spies.push(spy);
  return () =>
    spy.mock.calls
      .map((args) => String(args[0]))
      .filter((s) => s.startsWith('{'))
      .map((s) => JSON.parse(s) as Line);
}

/** Make Postgres refuse every write of `table` for this cluster as a missing relation; returns the mend. */
async function schemaFault(table: 'nodes' | 'cluster_owners' | 'desired_deployments' | 'operations', clusterUid: string, on = 'insert or update'): Promise<() => Promise<void>> {
  // DDL takes no parameters: the uid is the hub's own (a ULID), checked before it is inlined.
  if (!/^[0-9A-Za-z_-]+$/.test(clusterUid)) throw new Error(`unexpected cluster uid ${clusterUid}`);
  const name = `wingsmith_test_fault_${clusterUid.toLowerCase()}`;
  await sql(
    `create function ${name}() returns trigger language plpgsql as $$ begin
       raise exception 'relation "%" does not exist (simulated)', tg_table_name using errcode = '42P01';
     end $$`,
  );
  await sql(`create trigger ${name} before ${on} on ${table} for each row when (new.cluster_uid = '${clusterUid}') execute function ${name}()`);
  return async () => {
    await sql(`drop trigger if exists ${name} on ${table}`);
    await sql(`drop function if exists ${name}()`);
  };
}

describe('a fault is logged as a fault, and answered as an outage', () => {
  it('an ingest batch refused for a missing relation is an error naming the fault; the ack stays withheld and the frame applies once mended', async () => {
    const c = await newCluster('fault-ingest');
    const peer = await connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    const errors = capture('error');
    const warnings = capture('warn');
    const mend = await schemaFault('nodes', c.uid);
    try {
      peer.send('node.observed', node('n1'));
      const line = await eventually(async () => errors().find((l) => l.cluster === c.uid && l.msg.startsWith('ingest batch failed: not an outage')));
      expect(line).toMatchObject({ level: 'error', session, first_seq: 1, error: expect.stringMatching(/^42P01: relation "nodes" does not exist/) });
      // Not also reported as an outage, and nothing acknowledged while it fails.
      expect(warnings().filter((l) => l.cluster === c.uid && l.msg.startsWith('ingest batch failed'))).toEqual([]);
      expect(peer.lastAck() ?? 0).toBe(0);
    } finally {
      await mend();
    }
    await peer.ackedThrough(1, 10_000);
    expect(await sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n1' }]);
    peer.close();
  });

  it('a claim refused for a missing relation is an error naming the fault; the hello is answered 1013 (retry), and the next one is welcomed once mended', async () => {
    const c = await newCluster('fault-claim');
    const errors = capture('error');
    const mend = await schemaFault('cluster_owners', c.uid);
    try {
      const peer = await connect(c.token);
      peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      expect((await peer.closedWith(10_000)).code).toBe(CloseCode.TRY_AGAIN_LATER);
      expect(peer.frames.find((f) => f.type === 'error')?.payload).toMatchObject({ code: 'unavailable', retryable: true });
      const line = errors().find((l) => l.cluster === c.uid && l.msg === 'claim failed: not an outage (a code or schema fault)');
      expect(line).toMatchObject({ level: 'error', error: expect.stringMatching(/^42P01: relation "cluster_owners" does not exist/) });
    } finally {
      await mend();
    }
    const again = await connect(c.token);
    const welcome = await again.hello({ cluster_id: c.name });
    expect(welcome.payload.full_resync).toBe(true);
    again.close();
  });

  it('an admin write refused for a missing relation is an error naming the fault, answered 503 (retry) in JSON', async () => {
    const c = await newCluster('fault-admin');
    const errors = capture('error');
    const warnings = capture('warn');
    const mend = await schemaFault('desired_deployments', c.uid);
    try {
      const r = await admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
      expect(r).toMatchObject({ status: 503, json: { error: { code: 'unavailable' } } });
      const path = `/admin/clusters/${c.name}/deployments/d1`;
      const line = errors().find((l) => (l as { path?: string }).path === path);
      expect(line).toMatchObject({ level: 'error', msg: 'admin request failed: not an outage (a code or schema fault)', error: expect.stringMatching(/^42P01: /) });
      expect(warnings().filter((l) => (l as { path?: string }).path === path)).toEqual([]);
    } finally {
      await mend();
    }
    expect((await admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
  });

  it("a live session's check refused for a missing relation is an error naming the fault, not a warning the fleet poll seems to mend", async () => {
    const c = await newCluster('fault-check');
    const peer = await connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    const errors = capture('error');
    const warnings = capture('warn');
    // The check records the session's view on its owner row: the update Postgres refuses.
    const mend = await schemaFault('cluster_owners', c.uid, 'update');
    try {
      // A desired revision the session has not seen: the fleet poll pokes it to check.
      expect((await admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
      const line = await eventually(async () => [...errors(), ...warnings()].find((l) => l.cluster === c.uid && l.msg.startsWith('session check failed')));
      expect(line).toMatchObject({ level: 'error', session, msg: expect.stringContaining('not an outage'), error: expect.stringMatching(/^42P01: /) });
    } finally {
      await mend();
    }
    peer.close();
  });

  it("a session's record of an operation it sends, refused for a missing relation, is an error naming the fault; the start is sent once mended", async () => {
    const c = await newCluster('fault-pump');
    const peer = await connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    const errors = capture('error');
    const warnings = capture('warn');
    // Inserted by the admin API, then marked sent by the session before it queues the start.
    const mend = await schemaFault('operations', c.uid, 'update');
    try {
      const r = await admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n1', deadline_s: 60 });
      expect(r.status).toBe(202);
      const line = await eventually(async () => errors().find((l) => l.cluster === c.uid && l.msg.startsWith('desired-state fetch or operation record failed')));
      expect(line).toMatchObject({
        level: 'error',
        session,
        msg: expect.stringMatching(/^desired-state fetch or operation record failed: not an outage \(a code or schema fault\); nothing of it was sent; retried in \d+ ms or when the session is next poked$/),
        error: expect.stringMatching(/^42P01: /),
      });
      expect(warnings().filter((l) => l.cluster === c.uid && l.msg.startsWith('desired-state fetch'))).toEqual([]);
      expect(peer.frames.filter((f) => f.type === 'operation.start')).toEqual([]);
    } finally {
      await mend();
    }
    await eventually(async () => peer.frames.find((f) => f.type === 'operation.start'), 15_000);
    peer.close();
  });
});
