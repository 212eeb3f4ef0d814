import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, eventually, FAST_TIMERS, holdLock, node, useHub } from './support/hub';

const h = useHub();

const withinPoll = Number(FAST_TIMERS.POLL_INTERVAL_MS) * 2 + 3_000;

describe('ownership (spec: Resume is per hub instance; Authentication)', () => {
  it('two hellos for one cluster at once: exactly one owner, the other is closed with 4409', async () => {
    const c = await h.newCluster();
    const [a, b] = await Promise.all([h.connect(c.token), h.connect(c.token)]);
    await Promise.all([a.hello({ cluster_id: c.name }), b.hello({ cluster_id: c.name })]);
    const owner = (await h.sql<{ session_id: string }>('select session_id from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.session_id;
    const sessions = [a, b].map((p) => p.frames.find((f) => f.type === 'welcome')?.payload.session_id);
    expect(sessions).toContain(owner);
    const loser = sessions[0] === owner ? b : a;
    const winner = loser === a ? b : a;
    const closed = await loser.closedWith(withinPoll);
    expect(closed.code).toBe(CloseCode.DISPLACED);
    expect(winner.isClosed).toBe(false);
    winner.close();
  });

  it('a displaced session writes nothing: its frames are fenced off and never acknowledged', async () => {
    const c = await h.newCluster();
    const old = await h.connect(c.token);
    await old.hello({ cluster_id: c.name });
    await old.next((f) => f.type === 'stream.end');
    const fresh = await h.connect(c.token);
    await fresh.hello({ cluster_id: c.name });
    // The old session has not polled yet; its write must still not land.
    old.send('node.observed', {
      node_id: 'stale',
      name: 'stale',
      ready: true,
      schedulable: true,
      labels: {},
      taints: [],
      allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 },
    });
    expect((await old.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);
    expect(old.frames.some((f) => f.type === 'ack' && (f.ack ?? 0) >= 1)).toBe(false);
    expect(await h.sql('select 1 from nodes where cluster_uid = $1', [c.uid])).toEqual([]);
    fresh.close();
  });

  it('disabling a cluster cuts its live session within a poll interval: error then 4403', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const t0 = Date.now();
    await h.admin('POST', `/clusters/${c.name}/disable`);
    const err = await peer.next((f) => f.type === 'error', withinPoll);
    expect(err.payload).toMatchObject({ code: 'conflict', retryable: false });
    expect((await peer.closedWith()).code).toBe(CloseCode.REFUSED);
    expect(Date.now() - t0).toBeLessThan(withinPoll);
  });

  it('rotating the token cuts a live session opened with the old one: error then 4403', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await h.admin('POST', `/clusters/${c.name}/rotate-token`);
    const err = await peer.next((f) => f.type === 'error', withinPoll);
    expect(err.payload).toMatchObject({ code: 'not_found', retryable: false });
    expect((await peer.closedWith()).code).toBe(CloseCode.REFUSED);
  });

  it('the ownership poll publishes the live session view for the admin API', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    peer.send('node.observed', {
      node_id: 'n1',
      name: 'n1',
      ready: true,
      schedulable: true,
      labels: {},
      taints: [],
      allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 },
    });
    await peer.ackedThrough(1);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.status).toBe(200);
    expect(view.json.session).toMatchObject({ connected: true, session_id: w.payload.session_id, live: { hub_cursor: 1 } });
    peer.close();
  });

  it('a session that lost its claim to another is never resumed: its return is a fresh session with full resync', async () => {
    const c = await h.newCluster();
    const a = await h.openFresh(c);
    a.peer.send('node.observed', node('from-a'));
    await a.peer.ackedThrough(1);
    const b = await h.openFresh(c);
    expect((await a.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);

    // The displaced operator comes back asking to resume its own session, in its own object.
    const back = await h.connect(c.token, a.sessionId);
    const w = await back.hello({ cluster_id: c.name, session_id: a.sessionId, resume_from: a.peer.hubCursor });
    expect(w.payload.full_resync).toBe(true);
    expect(w.payload.session_id).not.toBe(a.sessionId);
    expect(w.payload.ack_seq).toBe(0);
    // Numbering restarted: the hub's resync stream begins at 1.
    const begin = await back.next((f) => f.type === 'resync.begin');
    expect(begin.seq).toBe(1);
    back.close();
    b.peer.close();
  });

  it('a session that lost its claim returns as a fresh session the fleet poll knows has sent nothing yet: it is poked while its resync is open', async () => {
    const c = await h.newCluster();
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
    // a's resync put the cluster's desired state (revision 1) into its stream: its watermark is 1.
    const a = await h.openFresh(c);
    const b = await h.openFresh(c);
    expect((await a.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);

    // The desired-state table is held (a migration, a stalled database): the returning session's
    // resync cannot be read and stays open, and the fleet poll is what pokes its retry.
    const release = await holdLock('lock table desired_deployments in access exclusive mode');
    const back = await h.connect(c.token, a.sessionId);
    let pinger: ReturnType<typeof setInterval> | undefined;
    try {
      const w = await back.hello({ cluster_id: c.name, session_id: a.sessionId, resume_from: a.peer.hubCursor });
      expect(w.payload.full_resync).toBe(true);
      const fresh = w.payload.session_id as string;
      // Alive and acknowledging, as a real operator is (idle limit 3 s).
      pinger = setInterval(() => back.send('ping', {}, { ack: back.hubCursor }), 500);
      // The fresh session has sent none of the cluster's desired state, so the poll finds it
      // behind the cluster's revision and pokes it, and it checks (its owner row is polled).
      // Before, it joined the poll with the watermark of the session it replaced (1): taken for
      // caught up, it was never poked, and its resync waited on its own backoff (up to 30 s).
      await eventually(async () => {
        const [o] = await h.sql<{ checked: boolean }>('select polled_at > claimed_at as checked from cluster_owners where cluster_uid = $1 and session_id = $2', [c.uid, fresh]);
        return o?.checked === true;
      }, withinPoll);
      const [reg] = await h.sql<{ seen: number }>('select seen_revision::int as seen from live_sessions where session_id = $1', [fresh]);
      expect(reg?.seen).toBe(0);
    } finally {
      await release();
    }
    try {
      const end = await back.next((f) => f.type === 'stream.end', withinPoll);
      expect(end.payload).toEqual({ complete: true, count: 1 });
    } finally {
      clearInterval(pinger);
      back.close();
      b.peer.close();
    }
  });

  it('a session that reconnects while its own old connection is half-open still holds its claim and resumes', async () => {
    const c = await h.newCluster();
    const a = await h.openFresh(c);
    a.peer.send('node.observed', node('n1'));
    await a.peer.ackedThrough(1);
    const again = await h.connect(c.token, a.sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: a.sessionId, resume_from: a.peer.hubCursor });
    expect(w.payload).toMatchObject({ full_resync: false, session_id: a.sessionId, ack_seq: 1 });
    expect((await a.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.contention).toBeNull();
    again.close();
  });

  it('a claim that keeps changing hands is reported as contention in the cluster view, naming the sessions', async () => {
    const c = await h.newCluster();
    const opened: string[] = [];
    let previous: Awaited<ReturnType<typeof h.openFresh>> | null = null;
    // Five claims, each taken from a session that is still connected: four displacements.
    for (let i = 0; i < 5; i++) {
      const next = await h.openFresh(c);
      opened.push(next.sessionId);
      if (previous) expect((await previous.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);
      previous = next;
    }
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.operator_version).toBe('0.1.0');
    expect(view.json.contention).toMatchObject({ displacements: 4 });
    const named = (view.json.contention.sessions as { session_id: string }[]).map((s) => s.session_id).sort();
    expect(named).toEqual([...opened].sort());
    expect(Date.parse(view.json.contention.since)).toBeLessThanOrEqual(Date.parse(view.json.contention.last_at));
    // The fleet summary (which the dashboard reads every poll) says the same, without the sessions.
    const fleet = await h.admin('GET', '/fleet?limit=500');
    const item = (fleet.json.items as { uid: string }[]).find((i) => i.uid === c.uid) as Record<string, unknown>;
    const { sessions: _sessions, ...contention } = view.json.contention;
    expect({ operator_version: item['operator_version'], contention: item['contention'] }).toEqual({ operator_version: '0.1.0', contention });
    previous?.peer.close();
  });

  // Found by a review: anyone holding a leaked token can displace in a loop, a row each time, kept
  // a day. The view named every session of the episode and the Worker kept ten: a day of that
  // made the answer larger than an RPC carries, and a disable, committed, answered 500.
  it('a contention episode of 200,000 displacements: the view names the ten newest sessions, and a disable answers with it', async () => {
    const c = await h.newCluster();
    const a = await h.openFresh(c);
    const b = await h.openFresh(c);
    expect((await a.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);
    // As the claim records them: each displacement a new session taking the claim, a millisecond
    // apart, all after the real one above.
    const N = 200_000;
    await h.sql(
      `insert into cluster_displacements (cluster_uid, at, from_session, from_remote_addr, from_operator_version, to_session, to_remote_addr, to_operator_version)
       select $1, now() + make_interval(secs => i / 1000.0), 'loop-' || (i - 1) || '-' || repeat('x', 60), '203.0.113.9', 'v' || repeat('9', 100),
              'loop-' || i || '-' || repeat('x', 60), '203.0.113.9', 'v' || repeat('9', 100)
       from generate_series(1, $2::int) i`,
      [c.uid, N],
    );
    // As a day of them would be on disk: visible to an index-only count (the test hub's statements
    // time out after 1.5 s, and on a loaded machine a first read of 200,000 fresh rows took longer).
    await h.sql('vacuum (analyze) cluster_displacements');
    await h.sql(`update cluster_owners set contention_since = now() - interval '1 hour', contention_last_at = now() where cluster_uid = $1`, [c.uid]);
    try {
      const view = await h.admin('GET', `/clusters/${c.name}`);
      expect(view.status).toBe(200);
      expect(view.json.contention.displacements).toBeGreaterThanOrEqual(N);
      const named = (view.json.contention.sessions as { session_id: string }[]).map((s) => s.session_id.split('-').slice(0, 2).join('-'));
      expect(named).toEqual(Array.from({ length: 10 }, (_, i) => `loop-${N - i}`));
      const disabled = await h.admin('POST', `/clusters/${c.name}/disable`);
      expect(disabled.status).toBe(200);
      expect(disabled.json.disabled).toBe(true);
    } finally {
      b.peer.close();
      // The fleet view counts an active episode on every read: the file's later tests read it.
      await h.sql('delete from cluster_displacements where cluster_uid = $1', [c.uid]);
      await h.sql('update cluster_owners set contention_since = null, contention_last_at = null where cluster_uid = $1', [c.uid]);
    }
  });

  it('one displacement is not contention', async () => {
    const c = await h.newCluster();
    const a = await h.openFresh(c);
    const b = await h.openFresh(c);
    expect((await a.peer.closedWith(withinPoll)).code).toBe(CloseCode.DISPLACED);
    expect((await h.admin('GET', `/clusters/${c.name}`)).json.contention).toBeNull();
    const fleet = await h.admin('GET', '/fleet?limit=500');
    expect((fleet.json.items as { uid: string; contention: unknown }[]).find((i) => i.uid === c.uid)?.contention).toBeNull();
    b.peer.close();
  });
});
