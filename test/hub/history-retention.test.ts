/**
 * History retention (src/hub/db/history-prune.ts, run by the fleet pollers): events, rejections
 * and the progress reports of long-concluded operations older than HISTORY_RETENTION_MS are
 * deleted, a batch at a time until none is left; newer history stays. Operations themselves go at
 * their own horizon, OPERATIONS_RETENTION_MS, once their history is gone. Before, these tables
 * only grew.
 */
import { describe, expect, inject, it } from 'vitest';
import { HISTORY_RETENTION_MAX_MS } from '../../src/hub/config';
import { pruneHistory } from '../../src/hub/db/history-prune';
import { newId } from '../../src/protocol';
import { withFileSql } from '../support/file-database';
import { eventually, FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

// A day of history, three of operations, passes every 400 ms, 3 rows of each table per pass: 7
// old rows of each take three passes, so the backlog path (the next pass at the next poll) is
// exercised too.
const lines = captureHubLines();
// Info lines too: a pass that deleted something says so.
process.env.E2E_HUB_LOG = 'log';
const h = useHub({
  ...FAST_TIMERS,
  HISTORY_RETENTION_MS: String(24 * 3_600_000),
  OPERATIONS_RETENTION_MS: String(3 * 24 * 3_600_000),
  HISTORY_PRUNE_INTERVAL_MS: '400',
  HISTORY_PRUNE_BATCH: '3',
});

const OLD = "now() - interval '2 days'";
/** Past the operations' horizon too. */
const ANCIENT = "now() - interval '4 days'";
const LONGEST = { historyMs: HISTORY_RETENTION_MAX_MS, operationsMs: HISTORY_RETENTION_MAX_MS };
const count = async (table: string, uid: string) =>
  Number((await h.sql<{ n: string }>(`select count(*) as n from ${table} where ${table === 'operation_events' ? 'operation_id in (select operation_id from operations where cluster_uid = $1)' : 'cluster_uid = $1'}`, [uid]))[0]?.n);

type PlanNode = { 'Subplan Name'?: string; 'Shared Hit Blocks': number; 'Shared Read Blocks': number; Plans?: PlanNode[] };

describe('history retention', () => {
  it('events, rejections and concluded (or long expired) operations\' progress older than HISTORY_RETENTION_MS are deleted in batches until none is left; newer history and operations younger than OPERATIONS_RETENTION_MS stay', async () => {
    const c = await h.newCluster();
    for (let i = 0; i < 10; i++) {
      const at = i < 7 ? OLD : 'now()';
      await h.sql(
        `insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, received_at, session_id, seq)
         values ($1, $2, 'node', 'n1', 'Test', '', 'info', ${at}, ${at}, 's', $3)`,
        [c.uid, newId(), i + 1],
      );
      await h.sql(`insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason, received_at) values ($1, 's', $2, null, 'node.observed', 'test', ${at})`, [c.uid, i + 1]);
    }
    const concluded = newId();
    const running = newId();
    // Past its deadline before the horizon and never concluded (shown deadline_exceeded): the
    // operator may keep reporting on it, so its old reports go as a concluded one's do.
    const expired = newId();
    for (const [id, concludedAt, deadline] of [[concluded, OLD, "now() + interval '1 day'"], [running, 'null', "now() + interval '1 day'"], [expired, 'null', OLD]] as const) {
      await h.sql(
        `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, created_at, concluded_at)
         values ($1, $2, 'drain_node', 'n1', '{}', ${deadline}, 1, ${concludedAt === 'null' ? "'running'" : "'succeeded'"}, ${OLD}, ${concludedAt})`,
        [id, c.uid],
      );
      for (let i = 0; i < 7; i++) {
        await h.sql(`insert into operation_events (operation_id, frame_id, kind, phase, message, at) values ($1, $2, 'progress', 'step', '', ${OLD})`, [id, newId()]);
      }
    }
    // The pollers run while a session is live.
    const { peer } = await h.openFresh(c);
    await eventually(async () => (await count('events', c.uid)) === 3 && (await count('rejections', c.uid)) === 3, 15_000);
    await eventually(async () => (await count('operation_events', c.uid)) === 7, 15_000);
    const left = await h.sql<{ operation_id: string; n: string }>(
      'select o.operation_id, count(e.frame_id) as n from operations o left join operation_events e using (operation_id) where o.cluster_uid = $1 group by 1',
      [c.uid],
    );
    expect(Object.fromEntries(left.map((r) => [r.operation_id, Number(r.n)]))).toEqual({ [concluded]: 0, [running]: 7, [expired]: 0 });
    const recent = await h.sql<{ recent: boolean }>("select bool_and(received_at > now() - interval '1 hour') as recent from events where cluster_uid = $1", [c.uid]);
    expect(recent[0]?.recent).toBe(true);
    peer.close();
  });

  it('an operation concluded, or past its deadline, before OPERATIONS_RETENTION_MS is deleted once its history is gone, and its Idempotency-Key then starts a new operation; open and younger operations stay', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const DRAIN = { kind: 'node.drain', target: 'n-1', params: { grace_period_s: 30, evict_daemonsets: false }, deadline_s: 300 };
    const post = async () => {
      const res = await fetch(`${h.hub.url}/admin/clusters/${c.name}/operations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json', 'idempotency-key': 'nightly-drain' },
        body: JSON.stringify(DRAIN),
      });
      return { status: res.status, replayed: res.headers.get('idempotent-replayed'), id: ((await res.json()) as { operation_id: string }).operation_id };
    };
    const first = await post();
    expect(first.status).toBe(202);
    // Concluded four days ago, with reports from then: past both horizons. The reports go in
    // first: concluded with none, the pollers' next pass (every 400 ms) could delete it before
    // they were written.
    for (let i = 0; i < 4; i++) {
      await h.sql(`insert into operation_events (operation_id, frame_id, kind, phase, message, at) values ($1, $2, 'progress', 'step', '', ${ANCIENT})`, [first.id, newId()]);
    }
    await h.sql(`update operations set state = 'succeeded', created_at = ${ANCIENT}, concluded_at = ${ANCIENT} where operation_id = $1`, [first.id]);
    const insert = (id: string, state: string, deadline: string, concludedAt: string) =>
      h.sql(
        `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, created_at, concluded_at)
         values ($1, $2, 'node.drain', 'n1', '{}', ${deadline}, 1, '${state}', ${ANCIENT}, ${concludedAt})`,
        [id, c.uid],
      );
    // Never concluded, its deadline four days ago (read as deadline_exceeded): past the horizon.
    const expired = newId();
    await insert(expired, 'sent', ANCIENT, 'null');
    // Concluded two days ago: its history is past HISTORY_RETENTION_MS, the operation is not past OPERATIONS_RETENTION_MS.
    const younger = newId();
    await insert(younger, 'failed', ANCIENT, OLD);
    // Started four days ago and still running (a deadline ahead): never due while open.
    const open = newId();
    await insert(open, 'running', "now() + interval '1 day'", 'null');

    const ids = async () => (await h.sql<{ operation_id: string }>('select operation_id from operations where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.operation_id);
    await eventually(async () => !(await ids()).includes(first.id) && !(await ids()).includes(expired), 15_000);
    expect(await ids()).toEqual([younger, open].sort());
    expect(await count('operation_events', c.uid)).toBe(0);
    expect((await h.admin('GET', `/operations/${first.id}`)).status).toBe(404);
    const line = lines.find((l) => l.msg.startsWith('history retention') && Number(l.operations) > 0);
    expect(line).toMatchObject({ level: 'info' });

    // The key lived as long as its operation: the same request now starts a new one.
    const again = await post();
    expect(again.status).toBe(202);
    expect(again.replayed).toBeNull();
    expect(again.id).not.toBe(first.id);
    peer.close();
  });

  // Found by a review: the pass chose the operation from its snapshot, in which the report being
  // written was not there yet, waited for the report's statement, then deleted the operation, and
  // the cascade took the report its operator had just been told was stored.
  it.skipIf(inject('embeddedPostgres'))('an operation whose report is being written while a pass falls due keeps it: the pass skips it, and its next one finds the report', async () => {
    const c = await h.newCluster();
    // The gateway's passes run while a session is live.
    const { peer } = await h.openFresh(c);
    const id = newId();
    // Concluded yesterday (inside the horizon) until the report's statement holds it.
    await h.sql(
      `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, created_at, concluded_at)
       values ($1, $2, 'node.drain', 'n1', '{}', ${ANCIENT}, 1, 'succeeded', ${ANCIENT}, now() - interval '1 day')`,
      [id, c.uid],
    );
    const frame = newId();
    const commit = await holdLock(`insert into operation_events (operation_id, frame_id, kind, phase, message) values ($1, $2, 'progress', 'step', 'late')`, [id, frame], 'commit');
    try {
      // Now past the horizon, and no report any pass can see.
      await h.sql(`update operations set concluded_at = ${ANCIENT} where operation_id = $1`, [id]);
      // Gone once a pass has run to its end while the report is held (before, the pass waited for it).
      const canary = newId();
      await h.sql(
        `insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, received_at, session_id, seq)
         values ($1, $2, 'node', 'n1', 'Canary', '', 'info', ${OLD}, ${OLD}, 's', 1)`,
        [c.uid, canary],
      );
      await eventually(async () => (await h.sql('select 1 from events where frame_id = $1', [canary])).length === 0, 5_000);
    } finally {
      await commit();
    }
    await sleep(1_300); // three more passes
    expect((await h.sql('select operation_id from operations where operation_id = $1', [id])).length).toBe(1);
    expect((await h.sql<{ frame_id: string }>('select frame_id from operation_events where operation_id = $1', [id])).map((r) => r.frame_id)).toEqual([frame]);
    peer.close();
  });

  it('history keeps being deleted once no session is live (an idle fleet: every cluster disconnected, disabled or moved to another region)', async () => {
    const c = await h.newCluster();
    // A session starts its shard's poller; then the fleet goes idle.
    const { peer } = await h.openFresh(c);
    peer.close();
    await peer.closed;
    await eventually(async () => Number((await h.sql<{ n: string }>('select count(*) as n from live_sessions'))[0]?.n) === 0, 10_000);
    // Several polls: every poller has seen its shard empty.
    await sleep(2_000);
    // History that reaches the horizon while the fleet is idle (inserted already past it here).
    for (let i = 0; i < 4; i++) {
      await h.sql(
        `insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, received_at, session_id, seq)
         values ($1, $2, 'node', 'n1', 'Test', '', 'info', ${OLD}, ${OLD}, 's', $3)`,
        [c.uid, newId(), i + 1],
      );
      await h.sql(`insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason, received_at) values ($1, 's', $2, null, 'node.observed', 'test', ${OLD})`, [c.uid, i + 1]);
    }
    // Before, the pollers stopped with the last session and no pass ever ran again: the rows
    // stayed, and the admin reads (which do not filter by the horizon) kept showing them.
    await eventually(async () => (await count('events', c.uid)) === 0 && (await count('rejections', c.uid)) === 0, 15_000);
  });

  it('a pass with the longest retention the configuration accepts runs (a horizon Postgres cannot compute failed every pass)', async () => {
    await expect(withFileSql((sql) => pruneHistory(sql, LONGEST, 100))).resolves.toMatchObject({ full: false });
  });

  it('a pass that finds nothing due reads a few index pages of each table, not the whole of events nor every operation ever concluded', async () => {
    // The statement exactly as the hub sends it, with its parameters: history kept 30 years and
    // operations the longest the configuration allows (so nothing this run wrote is due), and a
    // small batch, the case where the planner found a sequential scan of events cheapest.
    let sent: { text: string; params: unknown[] } | undefined;
    const retention = { historyMs: 30 * 365 * 24 * 3_600_000, operationsMs: HISTORY_RETENTION_MAX_MS };
    await pruneHistory({ query: async (text, params) => ((sent = { text, params: params ?? [] }), { rows: [], rowCount: 0 }) }, retention, 100);
    const c = await h.newCluster();
    // 20,000 events (hundreds of pages), none due; 2,000 operations concluded before the history's
    // horizon, whose reports earlier passes deleted, and after the operations' own.
    await h.sql(
      `insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, session_id, seq)
       select $1, 'f' || i, 'node', 'n' || (i % 50), 'Test', repeat('x', 100), 'info', now(), 's', i from generate_series(1, 20000) i`,
      [c.uid],
    );
    await h.sql(
      `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, created_at, concluded_at)
       select $1 || '-' || i, $2, 'drain_node', 'n1', '{}', timestamptz '1990-01-02', 1, 'succeeded', timestamptz '1990-01-01', timestamptz '1990-01-01' + i * interval '1 second'
       from generate_series(1, 2000) i`,
      [newId(), c.uid],
    );
    // And 200 recent operations with 50 reports each (10,000, none due).
    await h.sql(
      `with o as (
         insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state)
         select $1 || '-recent-' || i, $2, 'drain_node', 'n1', '{}', now() + interval '1 day', 1, 'running' from generate_series(1, 200) i
         returning operation_id)
       insert into operation_events (operation_id, frame_id, kind, phase, message)
       select o.operation_id, 'f' || k, 'progress', 'step', repeat('x', 100) from o, generate_series(1, 50) k`,
      [newId(), c.uid],
    );
    await h.sql('analyze events, operations, operation_events, rejections');
    const [row] = await withFileSql(async (sql) => (await sql.query<{ 'QUERY PLAN': unknown }>(`explain (analyze, buffers, format json) ${sent!.text}`, sent!.params)).rows);
    const plan = (typeof row!['QUERY PLAN'] === 'string' ? JSON.parse(row!['QUERY PLAN']) : row!['QUERY PLAN']) as [{ Plan: PlanNode }];
    const pages = Object.fromEntries(
      (plan[0].Plan.Plans ?? [])
        .filter((p) => /^CTE (ev|rj|oe|op)$/.test(p['Subplan Name'] ?? ''))
        .map((p) => [p['Subplan Name']!.slice(4), p['Shared Hit Blocks'] + p['Shared Read Blocks']]),
    );
    // Before (0020's BRIN, no order): events 541 pages here (a sequential scan of all of it),
    // operation events 848 (every old operation's reports looked up); now 2 or fewer each. The
    // operations' own pass reads the oldest end time's index page and stops (0026).
    expect(Object.keys(pages).sort()).toEqual(['ev', 'oe', 'op', 'rj']);
    expect(Object.entries(pages).filter(([, n]) => n > 20)).toEqual([]);
  });

  it('a pass that fails for a schema fault (a migration not run) is logged at error, not as an outage', async () => {
    const c = await h.newCluster();
    // A live session keeps the pollers' alarms (and so their passes) coming.
    const { peer } = await h.openFresh(c);
    const before = lines.length;
    await h.sql('alter table rejections rename column received_at to received_at_gone');
    try {
      const line = await eventually(async () => lines.slice(before).find((l) => l.msg.startsWith('history retention pass failed')), 10_000);
      expect(line).toMatchObject({ level: 'error', msg: expect.stringContaining('not an outage'), error: expect.stringMatching(/^42703: /) });
    } finally {
      await h.sql('alter table rejections rename column received_at_gone to received_at');
    }
    peer.close();
  });
});
