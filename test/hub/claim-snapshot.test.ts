/**
 * A fresh session's claim comes back from the gateway with the first page of its resync snapshot
 * (src/hub/db/claim-snapshot.ts), and the session queues that page with its welcome. The page is
 * tiny here (CLAIM_SNAPSHOT_ROWS = 2) so that every way a resync can go past it is exercised:
 * more deployments than the page, exactly a page, open operations to deliver after the stream.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { claimWithSnapshot } from '../../src/hub/db/claim-snapshot';
import { fetchFirstSnapshotPage } from '../../src/hub/db/desired';
import type { Sql } from '../../src/hub/db/sql';
import { newId } from '../../src/protocol';
import { claimArgs } from '../support/claim-args';
import { withFileSql as withSql } from '../support/file-database';
import { desired, FAST_TIMERS, holdLock, useHub, type Frame, type Peer, type TestCluster } from './support/hub';

const EMBEDDED = inject('embeddedPostgres');

const h = useHub({ ...FAST_TIMERS, CLAIM_SNAPSHOT_ROWS: '2' });

async function put(c: TestCluster, ids: string[]): Promise<void> {
  for (const d of ids) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/${d}`, desired())).status).toBe(200);
}

async function startOperation(c: TestCluster): Promise<string> {
  const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target: 'n-1', params: {}, deadline_s: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  return r.json.operation_id as string;
}

/** The hub's resync stream after a fresh welcome: begin, every item, stream.end. */
async function resyncStream(peer: Peer): Promise<{ begin: Frame; items: Frame[]; end: Frame }> {
  const begin = await peer.next((f) => f.seq !== null);
  expect(begin).toMatchObject({ type: 'resync.begin', seq: 1, payload: { scope: ['deployment'] } });
  const items: Frame[] = [];
  for (;;) {
    const f = await peer.next((x) => x.seq !== null);
    if (f.type === 'stream.end') return { begin, items, end: f };
    items.push(f);
  }
}

/** A cluster registered straight in Postgres with a token hash the test knows. */
async function registered(sql: Sql, deployments: string[]): Promise<{ uid: string; tokenHash: string }> {
  const uid = newId();
  const tokenHash = randomBytes(32).toString('hex');
  await sql.query(`insert into clusters (uid, name, token_hash, token_issued_at) values ($1, $2, decode($3, 'hex'), now())`, [uid, `snap-${uid}`, tokenHash]);
  for (const [i, d] of deployments.entries()) {
    await sql.query(
      `insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted)
       values ($1, $2, 'w', $3, 1, 2, $4::jsonb, $5)`,
      [uid, d, i + 1, JSON.stringify(desired().serving), d.startsWith('gone')],
    );
  }
  await sql.query('update clusters set desired_revision = $2 where uid = $1', [uid, deployments.length]);
  return { uid, tokenHash };
}


const PAGE = { rows: 2, bytes: 1 << 20, deadlineMs: 1_000 };

const noFailure = (err: unknown) => {
  throw new Error(`unexpected page failure: ${String(err)}`);
};

describe("the gateway's claim reads a fresh session its first snapshot page", () => {
  it('live deployments in deployment_id order, at most the rows asked for; none for a resumed, refused or page-less claim', async () => {
    await withSql(async (sql) => {
      const { uid, tokenHash } = await registered(sql, ['d3', 'gone-1', 'd1', 'd2']);
      const fresh = await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, PAGE, noFailure);
      expect(fresh.refusal).toBeNull();
      expect(fresh.desiredRevision).toBe(4);
      expect(fresh.snapshot?.openOperations).toBe(false);
      expect(fresh.snapshot?.deployments).toEqual([
        { deployment_id: 'd1', workload_id: 'w', revision: 3, min_replicas: 1, max_replicas: 2, serving: desired().serving, deleted: false },
        { deployment_id: 'd2', workload_id: 'w', revision: 4, min_replicas: 1, max_replicas: 2, serving: desired().serving, deleted: false },
      ]);

      // The same session claiming again with its generation resumes: no snapshot is owed.
      const resumed = await claimWithSnapshot(sql, claimArgs(uid, tokenHash, { resume: { sessionId: fresh.sessionId as string, generation: fresh.generation as number } }), null, PAGE, noFailure);
      expect(resumed.sessionId).toBe(fresh.sessionId);
      expect(resumed.snapshot).toBeNull();

      // Asked for none: none read.
      expect((await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, { rows: 0, bytes: 1 << 20, deadlineMs: 1_000 }, noFailure)).snapshot).toBeNull();
      // A refused claim reads nothing either.
      const refused = await claimWithSnapshot(sql, claimArgs(uid, '00'.repeat(32)), null, PAGE, noFailure);
      expect(refused.refusal).toBe('token_rotated');
      expect(refused.snapshot).toBeNull();
    });
  });

  it('a page that cannot be read leaves the claim granted and the page to the session', async () => {
    await withSql(async (sql) => {
      const { uid, tokenHash } = await registered(sql, ['d1']);
      const failures: unknown[] = [];
      await sql.query('alter table desired_deployments rename to desired_deployments_away');
      let claim;
      try {
        claim = await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, PAGE, (err) => failures.push(err));
      } finally {
        await sql.query('alter table desired_deployments_away rename to desired_deployments');
      }
      expect(claim.refusal).toBeNull();
      expect(claim.generation).toBe(1);
      expect(claim.snapshot).toBeNull();
      expect(failures).toHaveLength(1);
    });
  });

  // PGlite has one backend: a held lock blocks every statement, the claim's too.
  it.skipIf(EMBEDDED)('a page held up by a lock on its table is given up at its deadline; the claim is answered granted', async () => {
    await withSql(async (sql) => {
      const { uid, tokenHash } = await registered(sql, ['d1']);
      const failures: unknown[] = [];
      const release = await holdLock('lock table desired_deployments in access exclusive mode');
      let claim;
      // Without the deadline this call would wait for the lock, which is only released after it.
      try {
        claim = await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, { rows: 2, bytes: 1 << 20, deadlineMs: 300 }, (err) => failures.push(err));
      } finally {
        await release();
      }
      expect(claim.refusal).toBeNull();
      expect(claim.snapshot).toBeNull();
      expect(failures.map((e) => (e as Error).name)).toEqual(['PageDeadlineError']);
    });
  });

  it("a claim that ends past the caller's answer-by time reads no page: the claim is answered at once, granted", async () => {
    // Found by a read-only review: a claim slow to commit (a connection slow to open, a lock) then
    // waited up to its page deadline more, past the session's own wait, and its granted claim was
    // answered to no one. Here the answer-by time has passed when the claim commits.
    await withSql(async (sql) => {
      const { uid, tokenHash } = await registered(sql, ['d1']);
      const failures: unknown[] = [];
      const claim = await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, { rows: 2, bytes: 1 << 20, deadlineMs: 1_000, endBy: Date.now() }, (err) => failures.push(err));
      expect(claim.refusal).toBeNull();
      expect(claim.snapshot).toBeNull();
      expect(failures.map((e) => (e as Error).name)).toEqual(['PageDeadlineError']);
    });
  });

  it('bounded by bytes as well as rows: a page past its byte budget stops (always holding its first row) and says more follow', async () => {
    await withSql(async (sql) => {
      const { uid, tokenHash } = await registered(sql, ['d3', 'd1', 'd2']);
      const fresh = await claimWithSnapshot(sql, claimArgs(uid, tokenHash), null, { ...PAGE, rows: 3, bytes: 1 }, noFailure);
      expect(fresh.snapshot?.deployments.map((d) => d.deployment_id)).toEqual(['d1']);
      expect(fresh.snapshot?.more).toBe(true);
      const fence = { clusterUid: uid, sessionId: fresh.sessionId as string, generation: fresh.generation as number, tokenHash };
      const whole = await fetchFirstSnapshotPage(sql, fence, fresh.desiredRevision, 3, 1 << 20);
      expect(whole?.deployments.map((d) => d.deployment_id)).toEqual(['d1', 'd2', 'd3']);
      expect(whole?.more).toBe(true);
      const short = await fetchFirstSnapshotPage(sql, fence, fresh.desiredRevision, 4, 1 << 20);
      expect(short?.more).toBe(false);
    });
  });

  it('says whether unconcluded operations up to the claimed revision are owed', async () => {
    const c = await h.newCluster('snapops');
    await startOperation(c);
    const [row] = await h.sql<{ token_hash: string }>(`select encode(token_hash, 'hex') as token_hash from clusters where uid = $1`, [c.uid]);
    await withSql(async (sql) => {
      const claim = await claimWithSnapshot(sql, claimArgs(c.uid, row?.token_hash as string), null, PAGE, noFailure);
      expect(claim.snapshot).toEqual({ deployments: [], more: false, openOperations: true });
      // Up to a revision below the operation's: none owed.
      const fence = { clusterUid: c.uid, sessionId: claim.sessionId as string, generation: claim.generation as number, tokenHash: row?.token_hash as string };
      expect((await fetchFirstSnapshotPage(sql, fence, 0, 2, 1 << 20))?.openOperations).toBe(false);
    });
  });
});

describe("a fresh session's resync starts from its claim's page and goes on past it", () => {
  it('more deployments than the page: every live one exactly once, in order, in one complete stream', async () => {
    const c = await h.newCluster('snapmore');
    await put(c, ['e', 'a', 'd', 'b', 'c']);
    expect((await h.admin('DELETE', `/clusters/${c.name}/deployments/b`)).status).toBe(200);
    const peer = await h.connect(c.token);
    expect((await peer.hello({ cluster_id: c.name })).payload.full_resync).toBe(true);
    const { begin, items, end } = await resyncStream(peer);
    expect(items.map((f) => f.type)).toEqual(Array(4).fill('deployment.desired'));
    expect(items.map((f) => f.payload.deployment_id)).toEqual(['a', 'c', 'd', 'e']);
    for (const f of items) expect(f.reply_to).toBe(begin.id);
    expect(items.map((f) => f.seq)).toEqual([2, 3, 4, 5]);
    expect(end).toMatchObject({ reply_to: begin.id, seq: 6, payload: { complete: true, count: 4 } });
    peer.close();
  });

  it('exactly a page: the stream still ends complete after the fetch finds no more', async () => {
    const c = await h.newCluster('snapexact');
    await put(c, ['x', 'y']);
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const { items, end } = await resyncStream(peer);
    expect(items.map((f) => f.payload.deployment_id)).toEqual(['x', 'y']);
    expect(end.payload).toEqual({ complete: true, count: 2 });
    peer.close();
  });

  it('open operations are delivered after the stream, and a change made after the welcome follows them', async () => {
    const c = await h.newCluster('snapop');
    await put(c, ['only']);
    const opId = await startOperation(c);
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const { items, end } = await resyncStream(peer);
    expect(items.map((f) => f.payload.deployment_id)).toEqual(['only']);
    expect(end.payload).toEqual({ complete: true, count: 1 });
    const start = await peer.next((f) => f.seq !== null);
    expect(start).toMatchObject({ type: 'operation.start', seq: 4, payload: { operation_id: opId } });
    peer.send('ack', {}, { ack: 4 });
    await put(c, ['later']);
    const later = await peer.next((f) => f.seq !== null);
    expect(later).toMatchObject({ type: 'deployment.desired', seq: 5, reply_to: null, payload: { deployment_id: 'later', deleted: false } });
    peer.close();
  });
});
