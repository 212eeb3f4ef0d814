/**
 * A statement the hub gave up on (no answer within PG_QUERY_TIMEOUT_MS) may still reach Postgres
 * and commit later: a half-dead path that heals delivers its bytes, and `statement_timeout` counts
 * only from their arrival. Retried on a new connection, its frames and newer ones would commit
 * first and then be overwritten by it. So the session applies nothing more and sends the operator
 * away (1013); the resume's claim moves the fence's generation, which the late statement then fails.
 *
 * The hub reaches the database through the usual WS→TCP proxy whose TCP side goes through a stall
 * relay (support/stall-relay.ts): a statement already on the server runs on, and commits, whatever
 * becomes of its link.
 */
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { startStallRelay } from './support/stall-relay';
import { desired, eventually, FAST_TIMERS, node, sleep, type Peer } from './support/hub';

const QUERY_MS = 1_500;
// One gateway connection: a statement asked for while it is stalled is the one sent into the stall.
const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: String(QUERY_MS), IDLE_TIMEOUT_MS: '30000', HOLE_TIMEOUT_MS: '20000', RETENTION_MS: '60000', DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' }, startStallRelay);

/**
 * Resume until welcomed: the gateway's own connections were stalled too, so the token lookup or
 * the claim may be refused (503, 1013: retry) until it has given up on them.
 */
async function resume(c: { token: string; name: string }, sessionId: string, hubCursor: number): Promise<Peer> {
  for (let attempt = 0; ; attempt++) {
    let again: Peer | null = null;
    try {
      again = await h.connect(c.token, sessionId);
      const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: hubCursor });
      expect(welcome.payload['full_resync'], 'resumed, not a fresh session').toBe(false);
      return again;
    } catch (err) {
      again?.close();
      if (attempt >= 20) throw err;
      await sleep(300);
    }
  }
}

describe('an ingest statement given up on unanswered', () => {
  it('does not overwrite a newer, acknowledged observation when it commits late', async () => {
    const c = await h.newCluster('late-ing');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1', true)); // seq 1: opens the session's ingest connection
    await peer.ackedThrough(1);
    relay().stallOpen();
    peer.send('node.observed', node('n1', true)); // seq 2: its statement is held on the stalled connection
    // Either the hub sends the operator away (1013) and it resumes and replays seq 2, or (what the
    // hub did before) it retries seq 2 on a new connection and acks it on the same link.
    const outcome = await Promise.race([peer.closed.then((c) => c.code), peer.ackedThrough(2, 10_000).then(() => 'acked' as const)]);
    let live = peer;
    if (outcome !== 'acked') {
      expect(outcome).toBe(1013);
      expect(peer.lastAck()).toBe(1);
      live = await resume(c, sessionId, peer.hubCursor);
      live.nextSeq = 2;
      live.send('node.observed', node('n1', true));
    }
    live.send('node.observed', node('n1', false)); // seq 3: the operator's newest word: not ready
    await live.ackedThrough(3, 10_000);
    const acked = await h.sql<{ ready: boolean; obs_seq: string }>('select ready, obs_seq from nodes where cluster_uid = $1 and node_id = $2', [c.uid, 'n1']);
    expect(acked[0]).toMatchObject({ ready: false, obs_seq: '3' });
    // The stalled path heals: the abandoned seq-2 statement reaches Postgres now, fenced off.
    relay().releaseHeld();
    await sleep(1_500);
    const after = await h.sql<{ ready: boolean; obs_seq: string }>('select ready, obs_seq from nodes where cluster_uid = $1 and node_id = $2', [c.uid, 'n1']);
    expect(after[0], 'the node as the operator last reported it (seq 3, acknowledged)').toMatchObject({ ready: false, obs_seq: '3' });
    live.close();
  }, 40_000);
});

describe('an ingest statement whose connection is lost while it runs', () => {
  // Found by review: only a statement unanswered past its deadline was taken to be of unknown
  // outcome. One whose connection dropped under it was retried on a new connection at once and
  // acknowledged, newer frames after it; the original, still running on the server (Postgres
  // notices a closed connection only when it answers, after its commit), then committed the
  // older state over them.
  it('does not overwrite a newer, acknowledged observation when it commits after the loss', async () => {
    const c = await h.newCluster('lost-ing');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1', true)); // seq 1
    await peer.ackedThrough(1);
    // The first statement carrying seq 2 waits on the server until released (no other does).
    const gate = `wingsmith_test_gate_${c.uid.toLowerCase()}`;
    await h.sql(`create table ${gate} (released boolean)`);
    await h.sql(`create sequence ${gate}_calls`);
    await h.sql(`create function ${gate}() returns trigger language plpgsql as $$ begin
      if nextval('${gate}_calls') = 1 then
        while not exists (select 1 from ${gate}) loop perform pg_sleep(0.02); end loop;
      end if;
      return new; end $$`);
    await h.sql(`create trigger ${gate} before insert or update on nodes for each row when (new.cluster_uid = '${c.uid}' and new.obs_seq = 2) execute function ${gate}()`);
    const release = () => h.sql(`insert into ${gate} values (true)`);
    const gateWaiting = async () => (await h.sql(`select 1 from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep'`)).length > 0;
    try {
      peer.send('node.observed', node('n1', true)); // seq 2
      await eventually(gateWaiting, 5_000);
      relay().cutOpen();
      // Either the hub sends the operator away (1013) and it resumes and replays seq 2, or (what
      // the hub did before) it retries seq 2 on a new connection and acks it on the same link.
      const outcome = await Promise.race([peer.closed.then((x) => x.code), peer.ackedThrough(2, 10_000).then(() => 'acked' as const)]);
      let live = peer;
      if (outcome !== 'acked') {
        expect(outcome).toBe(1013);
        expect(peer.lastAck()).toBe(1);
        // The statement goes on to commit; the resume's claim waits for it (its fence's lock).
        await release();
        live = await resume(c, sessionId, peer.hubCursor);
        live.nextSeq = 2;
        live.send('node.observed', node('n1', true));
      }
      live.send('node.observed', node('n1', false)); // seq 3: the operator's newest word: not ready
      await live.ackedThrough(3, 10_000);
      await release();
      // The statement cut off from its link has ended (committed, or timed out).
      await eventually(async () => !(await gateWaiting()), 5_000);
      const rows = await h.sql<{ ready: boolean; obs_seq: string }>('select ready, obs_seq from nodes where cluster_uid = $1 and node_id = $2', [c.uid, 'n1']);
      expect(rows[0], 'the node as the operator last reported it (seq 3, acknowledged)').toMatchObject({ ready: false, obs_seq: '3' });
      live.close();
    } finally {
      await h.sql(`drop trigger if exists ${gate} on nodes`);
      await h.sql(`drop function if exists ${gate}()`);
      await h.sql(`drop sequence if exists ${gate}_calls`);
      await h.sql(`drop table if exists ${gate}`);
    }
  }, 40_000);
});

describe('an admin statement still waiting for its connection when the hub gives up', () => {
  // Found by review: the query deadline counted only from when the statement was sent, not from
  // when it was asked for, so one waiting on a slow connect (up to 5 s, past the Worker's wait)
  // was sent after the admin had been answered 503, and committed: a PUT refused, then stored and
  // sent to the operator.
  it('is never sent: a PUT answered 503 is not stored or sent to the operator when the connection opens after', async () => {
    const c = await h.newCluster('slow-conn');
    const { peer } = await h.openFresh(c);
    // Postgres restarts and is slow to take connections: the gateway's next statement must connect.
    relay().restartSlowly();
    await sleep(500);
    let b: { status: number; json: any };
    try {
      b = await h.admin('PUT', `/clusters/${c.name}/deployments/b`, desired({ workload_id: 'wb' }));
    } finally {
      // Postgres takes connections again, the one opened for PUT b included.
      relay().releaseHeld();
    }
    expect(b.status).toBe(503);
    expect(b.json.error.code).toBe('unavailable');
    // Behind PUT b on the same shard and cluster: answered after anything of b could have committed.
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/c`, desired({ workload_id: 'wc' }));
    expect(put.status).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'c', 10_000);
    const rows = await h.sql<{ deployment_id: string }>('select deployment_id from desired_deployments where cluster_uid = $1 order by deployment_id', [c.uid]);
    expect(rows.map((r) => r.deployment_id), 'the PUT answered 503 was never written').toEqual(['c']);
    expect(peer.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.payload.deployment_id)).toEqual(['c']);
    peer.close();
  }, 40_000);
});

describe('a claim given up on unanswered, delivered late', () => {
  // Found by review: the hello was refused 1013 when its claim went unanswered, but the claim
  // (held on a half-dead path) committed later and moved the session's generation past the one
  // its object holds. The operator's resume then no longer matched the claim and was turned into
  // a fresh session and full resync (and a displacement of the session by itself), though no
  // other session ever held the cluster. Since 7acf1e3 a claim names when it must reach Postgres
  // by, and one delivered later writes nothing (test/hub/claim-late-arrival.test.ts); one that
  // commits with its answer lost is test/hub/claim-answer-lost.test.ts.
  it("writes nothing, and the resume after the 1013 still resumes", async () => {
    const c = await h.newCluster('late-claim');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1', true));
    await peer.ackedThrough(1);
    const cursor = peer.hubCursor;
    const generation = async () => (await h.sql<{ generation: string; connected: boolean }>('select generation, connected from cluster_owners where cluster_uid = $1', [c.uid]))[0];
    peer.close();
    await eventually(async () => (await generation())?.connected === false);
    const before = Number((await generation())?.generation);

    // The scenario needs the claim itself held on the quiet path (with one gateway connection,
    // another of the gateway's statements on it when the path went quiet would keep the claim
    // off the wire: the driver does not pipeline), so it is tried again until it was.
    const seen: string[] = [];
    for (let attempt = 1; ; attempt++) {
      const again = await h.connect(c.token, sessionId);
      // The token lookup is answered; the claim is sent into a path that has gone quiet.
      relay().stallOpen();
      again.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: sessionId, resume_from: cursor, lossy: false });
      let code = 0;
      let held = 0;
      try {
        // 1013 when the claim's deadline passes first, 4408 when the handshake's does: never welcomed.
        code = (await again.closedWith(10_000)).code;
        expect([1013, 4408]).toContain(code);
        expect(again.frames.map((f) => f.type)).not.toContain('welcome');
      } finally {
        // The path heals: the claim reaches Postgres, after the hello was refused.
        held = relay().heldCount();
        relay().releaseHeld();
      }
      await sleep(1_500);
      expect(Number((await generation())?.generation), 'the claim delivered late wrote nothing').toBe(before);
      if (held > 0) break;
      seen.push(`attempt ${attempt}: closed ${code}, ${held} chunks held at the release`);
      if (attempt === 3) throw new Error(`the claim was never held on the quiet path: ${seen.join('; ')}`);
    }

    const back = await resume(c, sessionId, cursor);
    const displacements = await h.sql('select 1 from cluster_displacements where cluster_uid = $1', [c.uid]);
    expect(displacements, 'no other session ever held the cluster').toEqual([]);
    back.close();
  }, 40_000);
});
