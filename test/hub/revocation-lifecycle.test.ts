/**
 * A cluster's credentials and state changing while its operator is connected, on real workerd and
 * Postgres at the production poll interval: resumes and reconnect storms on a rotated token,
 * concurrent rotations, disable and enable (and their answers when they race), a location hint's
 * change. The README's "a live session on the old token is cut at once" and the spec's refusal at
 * hello ("an error and a 4403 close").
 */
import WebSocket from 'ws';
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, eventually, FAST_TIMERS, holdLock, sleep, useHub, type TestCluster } from './support/hub';

const h = useHub({ ...FAST_TIMERS, POLL_INTERVAL_MS: '5000', IDLE_TIMEOUT_MS: '30000' });

/** Connect and hello with `token`; resolve to 'welcome' or the close code of a refusal. */
async function tryOpen(token: string, c: TestCluster, hint?: string | null, hello: Record<string, unknown> = {}): Promise<{ outcome: 'welcome' | number; frames: any[]; welcome?: any }> {
  const peer = await h.connect(token, hint);
  peer.send('hello', { operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false, cluster_id: c.name, ...hello } as never);
  const first = await peer.next((f) => f.type === 'welcome' || f.type === 'error', 8_000).catch(() => null);
  if (first?.type === 'welcome') {
    peer.close();
    return { outcome: 'welcome', frames: peer.frames, welcome: first };
  }
  const closed = await peer.closedWith(8_000);
  return { outcome: closed.code, frames: peer.frames };
}

/**
 * A disabled cluster whose session check is held (`releaseSessions`: its poke lost) is written to,
 * then enabled again before the next poll: once the checks run, the claim the disable revoked must
 * still be cut (4403), sent nothing written while disabled.
 */
async function cutAfterQuickEnable(cluster: string, peer: Awaited<ReturnType<typeof h.connect>>, releaseSessions: () => Promise<void>, revokedFlag: unknown): Promise<void> {
  try {
    expect((await h.admin('PUT', `/clusters/${cluster}/deployments/while-disabled`, desired())).status).toBe(200);
    await sleep(2_000);
    expect((await h.admin('POST', `/clusters/${cluster}/enable`)).status).toBe(200);
    await sleep(1_000);
    expect(peer.isClosed, `the lost poke did not cut it yet (owner row after the disable: ${JSON.stringify(revokedFlag)})`).toBe(false);
  } finally {
    await releaseSessions();
  }
  // The next poll (5 s) must find the claim the disable revoked.
  const closed = await peer.closedWith(8_000).catch(() => 'still open' as const);
  const sent = peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.deployment_id);
  expect({ closed: closed === 'still open' ? closed : closed.code, sent }, `owner row right after the disable: ${JSON.stringify(revokedFlag)}`).toEqual({
    closed: CloseCode.REFUSED,
    sent: [],
  });
  peer.close();
}

describe('old token after rotation', () => {
  it('a resume on the old token (with the session hint and resume_from) after rotate-token answered 200 is refused 4403', async () => {
    const c = await h.newCluster('rl');
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    expect((await h.admin('POST', `/clusters/${c.uid}/rotate-token`)).status).toBe(200);
    expect((await peer.closedWith(3_000)).code).toBe(CloseCode.REFUSED);
    const r = await tryOpen(c.token, c, sessionId, { session_id: sessionId, resume_from: cursor });
    expect(r.outcome).toBe(CloseCode.REFUSED);
    // (The error frame before it is checked with a raw client below: the connect route sends it at
    // once, before h.connect attaches its message listener.)
  });

  it('a reconnect storm (30 parallel connects) on the revoked token: all refused 4403, and the session on the new token is not disturbed', async () => {
    const c = await h.newCluster('rl');
    const { peer } = await h.openFresh(c);
    const rot = await h.admin('POST', `/clusters/${c.name}/rotate-token`);
    expect(rot.status).toBe(200);
    await peer.closedWith(3_000);
    const fresh = await h.openFresh({ ...c, token: rot.json.enrollment_token });
    const results = await Promise.all(Array.from({ length: 30 }, () => tryOpen(c.token, c).then((r) => r.outcome)));
    expect(new Set(results)).toEqual(new Set([CloseCode.REFUSED]));
    // The new-token session is still open and served.
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/after-storm`, desired())).status).toBe(200);
    const d = await fresh.peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'after-storm', 5_000);
    expect(d).toBeTruthy();
    const view = await h.admin('GET', `/clusters/${c.uid}`);
    expect(view.json.session?.session_id).toBe(fresh.sessionId);
    fresh.peer.close();
  }, 60_000);

  it('concurrent rotations: every answer is 200 with a distinct token, exactly one of them opens a session, and the live session is cut', async () => {
    const c = await h.newCluster('rl');
    const { peer } = await h.openFresh(c);
    const rots = await Promise.all(Array.from({ length: 8 }, () => h.admin('POST', `/clusters/${c.name}/rotate-token`)));
    expect(rots.map((r) => r.status)).toEqual(Array(8).fill(200));
    const tokens = rots.map((r) => r.json.enrollment_token as string);
    expect(new Set(tokens).size).toBe(8);
    expect((await peer.closedWith(3_000)).code).toBe(CloseCode.REFUSED);
    const outcomes = [];
    for (const t of [...tokens, c.token]) outcomes.push((await tryOpen(t, c)).outcome);
    expect(outcomes.filter((o) => o === 'welcome').length).toBe(1);
  }, 60_000);
});

describe('disable / enable', () => {
  it('disable then enable: the old session resumes (the session is kept for when the cluster is allowed back)', async () => {
    const c = await h.newCluster('rl');
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    expect((await h.admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    expect((await peer.closedWith(3_000)).code).toBe(CloseCode.REFUSED);
    const refused = await tryOpen(c.token, c, sessionId, { session_id: sessionId, resume_from: cursor });
    expect(refused.outcome).toBe(CloseCode.REFUSED);
    expect((await h.admin('POST', `/clusters/${c.name}/enable`)).status).toBe(200);
    const r = await tryOpen(c.token, c, sessionId, { session_id: sessionId, resume_from: cursor });
    expect(r.outcome).toBe('welcome');
    expect({ session_id: r.welcome.payload.session_id, full_resync: r.welcome.payload.full_resync }).toEqual({ session_id: sessionId, full_resync: false });
  }, 30_000);

  // The answer was read by a statement after the toggle's own, so an opposite toggle that committed
  // between them was reported as this one's result (a disable answered disabled: false).
  it('concurrent disable and enable: each 200 answer shows the state its own action set (disable → disabled, enable → enabled)', async () => {
    const c = await h.newCluster('rl');
    const mismatches: string[] = [];
    for (let i = 0; i < 15; i++) {
      const [d, e] = await Promise.all([h.admin('POST', `/clusters/${c.name}/disable`), h.admin('POST', `/clusters/${c.name}/enable`)]);
      expect([d.status, e.status]).toEqual([200, 200]);
      if (d.json.disabled !== true) mismatches.push(`round ${i}: disable answered disabled=${d.json.disabled}`);
      if (e.json.disabled !== false) mismatches.push(`round ${i}: enable answered disabled=${e.json.disabled}`);
    }
    const [row] = await h.sql<{ disabled: boolean }>('select disabled_at is not null as disabled from clusters where uid = $1', [c.uid]);
    const view = await h.admin('GET', `/clusters/${c.uid}`);
    expect(view.json.disabled).toBe(row!.disabled);
    expect(mismatches).toEqual([]);
  }, 60_000);

  it('a cluster cut by disable shows connected: false in GET /admin/clusters/{id}, the list and GET /admin/fleet', async () => {
    const c = await h.newCluster('rl');
    const { peer } = await h.openFresh(c);
    expect((await h.admin('POST', `/clusters/${c.uid}/disable`)).status).toBe(200);
    await peer.closedWith(3_000);
    await eventually(async () => {
      const one = await h.admin('GET', `/clusters/${c.uid}`);
      expect(one.json.session?.connected ?? false).toBe(false);
      expect(one.json.disabled).toBe(true);
      return true;
    }, 6_000);
    let found: any = null;
    let cursor: string | null = null;
    do {
      const page = await h.admin('GET', `/clusters?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      found = page.json.items.find((x: any) => x.uid === c.uid) ?? found;
      cursor = page.json.next_cursor;
    } while (cursor && !found);
    expect({ connected: found?.session?.connected ?? false, disabled: found?.disabled }).toEqual({ connected: false, disabled: true });
    let fl: any = null;
    cursor = null;
    do {
      const page = await h.admin('GET', `/fleet?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      fl = page.json.items.find((x: any) => x.uid === c.uid) ?? fl;
      cursor = page.json.next_cursor;
    } while (cursor && !fl);
    expect({ connected: fl?.connected, disabled: fl?.disabled }).toEqual({ connected: false, disabled: true });
  }, 30_000);
});

describe('location hint change with a live session', () => {
  it('after PATCH location_hint, a resume starts a fresh session once; the next resume of that new session is not fresh again', async () => {
    const c = await h.newCluster('rl');
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    const p = await h.admin('PATCH', `/clusters/${c.name}`, { location_hint: 'weur' });
    expect(p.status).toBe(200);
    expect(p.json.location_hint).toBe('weur');
    peer.close();
    await peer.closedWith(3_000);
    const peer2 = await h.connect(c.token, sessionId);
    const w2 = await peer2.hello({ cluster_id: c.name, session_id: sessionId, resume_from: cursor });
    expect(w2.payload.full_resync).toBe(true);
    expect(w2.payload.session_id).not.toBe(sessionId);
    await peer2.next((f) => f.type === 'stream.end');
    const cursor2 = peer2.hubCursor;
    const sid2 = w2.payload.session_id as string;
    peer2.close();
    await peer2.closedWith(3_000);
    const peer3 = await h.connect(c.token, sid2);
    const w3 = await peer3.hello({ cluster_id: c.name, session_id: sid2, resume_from: cursor2 });
    expect({ sid: w3.payload.session_id, full: w3.payload.full_resync }).toEqual({ sid: sid2, full: false });
    peer3.close();
  }, 30_000);

  // The answer ("the cluster as changed") was read by a statement after the PATCH's own update, so
  // a concurrent PATCH that committed between them was reported as this one's result.
  it('concurrent PATCHes: each 200 answer shows the hint its own PATCH set', async () => {
    const c = await h.newCluster('rl');
    const mismatches: string[] = [];
    for (let i = 0; i < 15; i++) {
      const [a, b] = await Promise.all([
        h.admin('PATCH', `/clusters/${c.name}`, { location_hint: 'weur' }),
        h.admin('PATCH', `/clusters/${c.name}`, { location_hint: 'enam' }),
      ]);
      expect([a.status, b.status]).toEqual([200, 200]);
      if (a.json.location_hint !== 'weur') mismatches.push(`round ${i}: PATCH weur answered ${a.json.location_hint}`);
      if (b.json.location_hint !== 'enam') mismatches.push(`round ${i}: PATCH enam answered ${b.json.location_hint}`);
    }
    const [row] = await h.sql<{ location_hint: string }>('select location_hint from clusters where uid = $1', [c.uid]);
    expect((await h.admin('GET', `/clusters/${c.uid}`)).json.location_hint).toBe(row!.location_hint);
    expect(mismatches).toEqual([]);
  }, 60_000);

  it('PATCH with the same hint (no change) leaves the session resumable', async () => {
    const c = await h.newCluster('rl');
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    expect((await h.admin('PATCH', `/clusters/${c.name}`, { location_hint: null })).status).toBe(200);
    peer.close();
    await peer.closedWith(3_000);
    const peer2 = await h.connect(c.token, sessionId);
    const w2 = await peer2.hello({ cluster_id: c.name, session_id: sessionId, resume_from: cursor });
    expect({ sid: w2.payload.session_id, full: w2.payload.full_resync }).toEqual({ sid: sessionId, full: false });
    peer2.close();
  }, 30_000);
});

/** A raw client whose listeners are attached before the upgrade completes: nothing can be missed. */
function rawRefusal(token: string, hint?: string): Promise<{ messages: string[]; code: number }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${h.hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${token}`, ...(hint ? { 'wingsmith-session': hint } : {}) }, perMessageDeflate: false });
    const messages: string[] = [];
    ws.on('message', (d) => messages.push(String(d)));
    ws.on('close', (code) => resolve({ messages, code }));
    ws.on('error', reject);
  });
}

describe('the refusal of a rotated token carries an error frame before 4403 (raw client)', () => {
  it('old token after rotate-token, no session hint: error frame, then 4403', async () => {
    const c = await h.newCluster('rl');
    expect((await h.admin('POST', `/clusters/${c.uid}/rotate-token`)).status).toBe(200);
    const r = await rawRefusal(c.token);
    expect({ code: r.code, types: r.messages.map((m) => JSON.parse(m).type) }).toEqual({ code: CloseCode.REFUSED, types: ['error'] });
  }, 30_000);

  it('old token after rotate-token, with the old session hint: error frame, then 4403', async () => {
    const c = await h.newCluster('rl');
    const { peer, sessionId } = await h.openFresh(c);
    expect((await h.admin('POST', `/clusters/${c.uid}/rotate-token`)).status).toBe(200);
    await peer.closedWith(3_000);
    const r = await rawRefusal(c.token, sessionId);
    expect({ code: r.code, types: r.messages.map((m) => JSON.parse(m).type) }).toEqual({ code: CloseCode.REFUSED, types: ['error'] });
  }, 30_000);
});

describe('a disable whose pokes were all lost', () => {
  // Found by review: the poll, the session's check and its fence compared only the cluster's
  // present state, so an enable before the revoked session was checked erased the disable: the
  // session stayed open for good and was sent what was written while the cluster was disabled.
  it('a session a disable revoked, whose checks all failed until the cluster was enabled again, is still cut (4403) and sent nothing written meanwhile; it resumes once it reconnects', async () => {
    const c = await h.newCluster('rl-lost');
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    // The disable's poke and every poll's poke end in a check of the session, which waits on its
    // poll row past the statement timeout (1.5 s) and fails: the revocation reaches it no other way.
    const release = await holdLock('select 1 from live_sessions where session_id = $1 for update', [sessionId]);
    try {
      expect((await h.admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
      expect((await h.admin('PUT', `/clusters/${c.name}/deployments/while-disabled`, desired())).status).toBe(200);
      await sleep(2_000);
      expect((await h.admin('POST', `/clusters/${c.name}/enable`)).status).toBe(200);
      await sleep(1_600);
      expect(peer.isClosed).toBe(false);
    } finally {
      await release();
    }
    // The next poll (5 s) finds the claim the disable revoked.
    expect((await peer.closedWith(7_000)).code).toBe(CloseCode.REFUSED);
    expect(peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.deployment_id)).toEqual([]);
    // The operator's next hello renews the claim (the cluster is enabled): the session resumes.
    const again = await h.connect(c.token, sessionId);
    again.hubCursor = cursor;
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: cursor });
    expect(w.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    expect((await again.next((f) => f.type === 'deployment.desired', 5_000)).payload.deployment_id).toBe('while-disabled');
    again.close();
  }, 30_000);

  // Found by review of the fix: a cluster's first claim, committed while the disable waited for it,
  // was not in the disable statement's snapshot and was never marked revoked.
  it('a cluster\'s first claim, committed while the disable waited for it, is revoked too: with the pokes lost and the cluster enabled again, the session is still cut (4403) and sent nothing written while disabled', async () => {
    const c = await h.newCluster('rv-first');
    expect(await h.sql('select 1 from cluster_owners where cluster_uid = $1', [c.uid])).toEqual([]);
    // An uncommitted owner row makes the first claim's insert wait (after it took the cluster row FOR SHARE).
    const releaseOwner = await holdLock(
      `insert into cluster_owners (cluster_uid, session_id, generation, connected) values ($1, 'placeholder', 1, false)`,
      [c.uid],
    );
    let releaseSessions: (() => Promise<void>) | null = null;
    try {
      const peer = await h.connect(c.token);
      peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      const welcome = peer.next((f) => f.type === 'welcome' || f.type === 'error', 8_000);
      await eventually(() => waiting('%insert into cluster_owners%on conflict%'), 3_000);
      // The disable now waits for the claim's lock on the cluster row.
      const disabled = h.admin('POST', `/clusters/${c.name}/disable`);
      await eventually(() => waiting('%update clusters set disabled_at%'), 3_000);
      // Behind the claim (which holds live_sessions ROW EXCLUSIVE since it began), queue a lock
      // that keeps every session check from writing its poll row: the disable's poke is lost.
      const sessionsLocked = holdLock('lock table live_sessions in share mode');
      await eventually(() => waiting('lock table live_sessions%'), 3_000);
      await releaseOwner();
      const w = await welcome;
      expect(w.type).toBe('welcome');
      expect((await disabled).status).toBe(200);
      releaseSessions = await sessionsLocked;
      const revokedFlag = (await h.sql<{ revoked: boolean; session_id: string }>('select revoked, session_id from cluster_owners where cluster_uid = $1', [c.uid]))[0];
      const release = releaseSessions;
      releaseSessions = null;
      await cutAfterQuickEnable(c.name, peer, release, revokedFlag);
    } finally {
      await releaseOwner().catch(() => undefined);
      if (releaseSessions) await releaseSessions();
    }
  }, 40_000);

  // Found by review: the claims a disable revoked were told apart from later ones by claimed_at <=
  // disabled_at, but both are their transactions' start times. A first claim that began after the
  // disable's statement (which had found no owner row) and locked the cluster row before the
  // disable's update did was committed before the disable, yet stamped later than it: never
  // revoked, so an enable before the next poll kept it open and sent it what was written while disabled.
  it('a first claim that began after the disable\'s statement but locked the cluster row first is revoked too: with the pokes lost and the cluster enabled again, the session is still cut (4403)', async () => {
    const c = await h.newCluster('rv-later');
    expect(await h.sql('select 1 from cluster_owners where cluster_uid = $1', [c.uid])).toEqual([]);
    // Something else holds the cluster row FOR SHARE (in production: another claim): the disable's
    // update waits for it, while a claim's FOR SHARE does not.
    const releaseCluster = await holdLock('select 1 from clusters where uid = $1 for share', [c.uid]);
    let releaseSessions: (() => Promise<void>) | null = null;
    try {
      const disabled = h.admin('POST', `/clusters/${c.name}/disable`);
      await eventually(() => waiting('%update clusters set disabled_at%'), 3_000);
      // The claim begins after the disable's statement did.
      const peer = await h.connect(c.token);
      const w = await peer.hello({ cluster_id: c.name });
      expect(w.type).toBe('welcome');
      // Keep every session check from writing its poll row: the disable's poke is lost.
      releaseSessions = await holdLock('lock table live_sessions in share mode');
      await releaseCluster();
      expect((await disabled).status).toBe(200);
      const revokedFlag = (await h.sql<{ revoked: boolean }>('select revoked from cluster_owners where cluster_uid = $1', [c.uid]))[0];
      const release = releaseSessions;
      releaseSessions = null;
      await cutAfterQuickEnable(c.name, peer, release, revokedFlag);
    } finally {
      await releaseCluster().catch(() => undefined);
      if (releaseSessions) await releaseSessions();
    }
  }, 40_000);

  // Found by review: a disable marks a cluster's first claim (committed while its statement waited,
  // so not in its snapshot) revoked with a second statement, which looked for the cluster still
  // disabled. An enable committed between the two left that claim unrevoked and its session open,
  // connected through a disable it was never cut by; the fleet poll saw nothing change after.
  it('a cluster\'s first claim is revoked by the disable it raced even when an enable commits before the disable\'s second statement: the session is cut (4403)', async () => {
    const c = await h.newCluster('rv-enable-between');
    const releaseOwner = await holdLock(
      `insert into cluster_owners (cluster_uid, session_id, generation, connected) values ($1, 'placeholder', 1, false)`,
      [c.uid],
    );
    let releaseOwners: (() => Promise<void>) | null = null;
    try {
      const peer = await h.connect(c.token);
      peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      const welcome = peer.next((f) => f.type === 'welcome' || f.type === 'error', 8_000);
      await eventually(() => waiting('%insert into cluster_owners%on conflict%'), 3_000);
      const disabled = h.admin('POST', `/clusters/${c.name}/disable`);
      await eventually(() => waiting('%update clusters set disabled_at%'), 3_000);
      // Queued behind the claim's and the disable's locks on the owner table: the disable's second
      // statement waits for it before it takes its snapshot.
      const ownersLocked = holdLock('lock table cluster_owners in share mode');
      await eventually(() => waiting('lock table cluster_owners%'), 3_000);
      await releaseOwner();
      expect((await welcome).type).toBe('welcome');
      releaseOwners = await ownersLocked;
      await eventually(() => waiting('%with seen as%'), 3_000);
      // What an enable commits (its admin route would wait on the table lock too).
      await h.sql('update clusters set disabled_at = null where uid = $1', [c.uid]);
      const release = releaseOwners;
      releaseOwners = null;
      await release();
      expect((await disabled).status).toBe(200);
      const owner = (await h.sql<{ revoked: boolean }>('select revoked from cluster_owners where cluster_uid = $1', [c.uid]))[0];
      expect(owner?.revoked, 'the claim the disable raced is revoked').toBe(true);
      const closed = await peer.closedWith(8_000).catch(() => 'still open' as const);
      expect(closed === 'still open' ? closed : closed.code).toBe(CloseCode.REFUSED);
    } finally {
      await releaseOwner().catch(() => undefined);
      if (releaseOwners) await releaseOwners();
    }
  }, 40_000);
});

/** Whether a statement matching `pattern` is waiting on a lock. */
async function waiting(pattern: string): Promise<boolean> {
  const rows = await h.sql<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity where datname = current_database() and state = 'active' and wait_event_type = 'Lock' and query ilike $1`,
    [pattern],
  );
  return rows[0]!.n > 0;
}
