/**
 * The session object's lifecycle against a hello under way (found by a review of it, each
 * confirmed here before the fix):
 * - a resume on a new connection while the old one is open: the old one's close published a
 *   disconnect with the generation the new claim had just recorded, which marked the session
 *   disconnected and took it out of the fleet poll for good (a disable never reached it);
 * - retention expiring while a resume arrives: forget() awaited the network before it deleted the
 *   storage, so the hello resumed and was welcomed, then the session was wiped under it (an open
 *   socket with nothing acked, no pong and no deadline);
 * - a frame deferred behind a hello that was refused was dispatched afterwards as that dead
 *   connection's first frame;
 * - a hello whose claim outlasted the connection's handshake deadline left its claim committed for a
 *   session that never opened, shown as connected until something claimed again (now until the
 *   fleet poll's sweep pokes it).
 */
import { runInDurableObject } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { CloseCode } from '../../src/protocol';
import { admin, connect, eventually, hubEnv, newCluster, node, sleep, sql } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

async function ownerRow(uid: string) {
  return (await sql<{ session_id: string; connected: boolean; generation: string }>('select session_id, connected, generation from cluster_owners where cluster_uid = $1', [uid]))[0];
}
async function polled(session: string) {
  return (await sql('select 1 from live_sessions where session_id = $1', [session])).length > 0;
}

describe('resume on a new connection while the old one is still open (supersede)', () => {
  it('control: old connection closed first, then resume; the session stays in the fleet poll and a disable closes it 4403', async () => {
    const c = await newCluster('life-ctl');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    a.close();
    await a.closed;
    await sleep(300);
    const b = await connect(c.token, s);
    const w = await b.hello({ cluster_id: c.name, session_id: s, resume_from: a.hubCursor });
    expect(w.payload.full_resync).toBe(false);
    await sleep(800);
    expect({ owner: await ownerRow(c.uid), polled: await polled(s) }).toMatchObject({ owner: { session_id: s, connected: true }, polled: true });
    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    expect((await b.closedWith(5_000)).code).toBe(CloseCode.REFUSED);
  });

  it('superseding resume: Postgres still says connected, the session stays in the fleet poll, and a disable closes it 4403', async () => {
    const c = await newCluster('life-sup');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    const b = await connect(c.token, s);
    const w = await b.hello({ cluster_id: c.name, session_id: s, resume_from: a.hubCursor });
    expect(w.payload.full_resync).toBe(false);
    expect((await a.closedWith()).code).toBe(CloseCode.DISPLACED);
    await sleep(800);
    const seen = { owner: await ownerRow(c.uid), polled: await polled(s) };
    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    const closed = await b.closedWith(5_000).then(
      (x) => x.code,
      () => 'still open 5 s after the disable',
    );
    expect({ ...seen, closed }).toMatchObject({ owner: { session_id: s, connected: true }, polled: true, closed: CloseCode.REFUSED });
  });
});

describe('retention expiry racing a resume hello', () => {
  it('a hello that resumes while forget() awaits pg.close() is not wiped after its welcome (no wedge)', async () => {
    const c = await newCluster('life-ret');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    const end = await a.next((f) => f.type === 'stream.end');
    a.send('ack', {}, { ack: end.seq });
    a.send('node.observed', node('n1'));
    await a.ackedThrough(1);
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
    // forget() awaits pg.close(), real I/O on the session's own connection (open: the test's
    // RETENTION_MS < PG_IDLE_CLOSE_MS); its deallocate may legitimately wait up to 1 s for a
    // stalled server. Widen exactly that await, and only when forget() is the caller.
    await runInDurableObject(stub, (i) => {
      const pg = (i as unknown as { pg: { close(): Promise<void> } }).pg;
      const orig = pg.close.bind(pg);
      const g = globalThis as { lifeForget?: string[] };
      g.lifeForget = [];
      pg.close = async () => {
        const fromForget = (new Error().stack ?? '').includes('forget');
        if (fromForget) {
          g.lifeForget?.push('close-start');
          await new Promise((r) => setTimeout(r, 1_000));
        }
        await orig();
        if (fromForget) g.lifeForget?.push('close-end');
      };
    });
    a.close();
    await a.closed;
    const g = globalThis as { lifeForget?: string[] };
    const t0 = Date.now();
    while (!g.lifeForget?.includes('close-start') && Date.now() - t0 < 6_000) await sleep(20);
    expect(g.lifeForget).toContain('close-start');

    const b = await connect(c.token, s);
    const w = await b.hello({ cluster_id: c.name, session_id: s, resume_from: a.hubCursor });
    const welcomedBeforeForgetEnded = !g.lifeForget?.includes('close-end');
    await sleep(1_300);
    const inside = await runInDurableObject(stub, async (i, state) => ({
      meta: (i as unknown as { state: { meta: unknown } }).state.meta !== null,
      alarm: await state.storage.getAlarm(),
      sockets: state.getWebSockets().length,
    }));
    b.nextSeq = (w.payload.ack_seq as number) + 1;
    b.send('node.observed', node('n2'));
    const acked = await b.ackedThrough(b.nextSeq - 1, 4_000).then(
      () => 'acked',
      (e: Error) => e.message,
    );
    b.send('ping', {});
    await sleep(500);
    const pong = b.frames.some((f) => f.type === 'pong');
    await sleep(3_000);
    expect({ welcomedBeforeForgetEnded, inside, acked, pong, closed: b.isClosed }).toMatchObject({ inside: { meta: true }, acked: 'acked', pong: true });
    b.close();
  });
});

describe('deferred frames of a connection whose hello failed', () => {
  it('are dropped, not taken as that dead connection\'s first frame', async () => {
    const c = await newCluster('life-def');
    if (!/^[0-9A-Za-z_-]+$/.test(c.uid)) throw new Error('uid');
    const name = `wingsmith_test_fault_${c.uid.toLowerCase()}`;
    await sql(`create function ${name}() returns trigger language plpgsql as $$ begin
       raise exception 'relation "%" does not exist (simulated)', tg_table_name using errcode = '42P01'; end $$`);
    await sql(`create trigger ${name} before insert or update on cluster_owners for each row when (new.cluster_uid = '${c.uid}') execute function ${name}()`);
    const warn = vi.spyOn(console, 'warn');
    spies.push(warn);
    try {
      const p = await connect(c.token);
      p.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      p.send('node.observed', node('n1'), { seq: 1 });
      expect((await p.closedWith(10_000)).code).toBe(CloseCode.TRY_AGAIN_LATER);
      await sleep(500);
    } finally {
      await sql(`drop trigger if exists ${name} on cluster_owners`);
      await sql(`drop function if exists ${name}()`);
    }
    const lines = warn.mock.calls.map((a) => String(a[0])).filter((l) => l.includes(c.uid) && l.includes('connection refused'));
    expect(lines.filter((l) => l.includes('first frame must be hello'))).toEqual([]);
  });
});

describe('a claim that outlasts its connection', () => {
  it('a hello whose handshake deadline passes during its claim leaves no session shown as connected', async () => {
    const c = await newCluster('life-phantom');
    if (!/^[0-9A-Za-z_-]+$/.test(c.uid)) throw new Error('uid');
    const name = `wingsmith_test_slow_${c.uid.toLowerCase()}`;
    // The claim takes 0.8 s; the hello comes 1.1 s after the upgrade, so the 1.5 s handshake
    // deadline passes while the claim runs (and well within the statement's own 1.5 s timeout).
    await sql(`create function ${name}() returns trigger language plpgsql as $$ begin perform pg_sleep(0.8); return new; end $$`);
    await sql(`create trigger ${name} before insert or update on cluster_owners for each row when (new.cluster_uid = '${c.uid}') execute function ${name}()`);
    try {
      const p = await connect(c.token);
      await sleep(1_100);
      p.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      expect((await p.closedWith(5_000)).code).toBe(CloseCode.TIMEOUT);
      await sleep(1_000);
    } finally {
      await sql(`drop trigger if exists ${name} on cluster_owners`);
      await sql(`drop function if exists ${name}()`);
    }
    // The claim committed for a session no object carries, shown as connected. The fleet poll's
    // sweep (one to two LIVE_SWEEP_MS after its claim) pokes it; poked here as the sweep would.
    const owner = await eventually(async () => (await ownerRow(c.uid)) ?? undefined);
    expect(owner.connected).toBe(true);
    const phantom = owner.session_id;
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(phantom) as string });
    expect(await stub.check(phantom, 'sweep')).toBe(false);
    expect({ owner: await ownerRow(c.uid), polled: await polled(phantom) }).toMatchObject({ owner: { session_id: phantom, connected: false }, polled: false });
  });
});
