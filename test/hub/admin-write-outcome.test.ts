/**
 * What an admin write's failure says about whether it was applied. 503 `unavailable` ("retry"):
 * it was not, and never will be. 504 `outcome_unknown`: the statement was sent and not answered,
 * so it may have committed. 504 `applied`: it committed, and reading back the answer failed. A script that retries every 503 would otherwise start a second
 * drain for an operation whose first one committed unanswered.
 *
 * A relay in front of Postgres loses the answer of the operation's statement after its commit
 * (answer-reset-relay.ts). And the hub waits for a write's answer a margin longer than the
 * database lets it run (pg.ts, answerMarginMs), so that a write blocked past its deadline
 * comes back refused, a definite "not applied", instead of unanswered.
 */
import { describe, expect, inject, it } from 'vitest';
import { pgClient } from '../../scripts/lib/pg-node';
import { fileDatabaseUrl } from '../support/file-database';
import { answerResetRelay } from './support/answer-reset-relay';
import { desired, FAST_TIMERS, sleep } from './support/hub';
import { useHubBehindRelay } from './support/proxy-hub';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS }, answerResetRelay('wingsmith_create_operation_v'));

async function postOperation(clusterUid: string, key: string) {
  const res = await fetch(`${h.hub.url}/admin/clusters/${clusterUid}/operations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ kind: 'node.drain', target: 'n1', params: {}, deadline_s: 300 }),
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), replayed: res.headers.get('idempotent-replayed'), json: (await res.json()) as any };
}

describe('an admin write that fails', () => {
  it('answers 504 outcome_unknown, not 503 "retry", when its statement committed and the answer was lost; repeated with its Idempotency-Key it finds the operation', async () => {
    const c = await h.newCluster('outcome-lost');
    const lost = relay().resetNextAnswer();
    const first = await postOperation(c.uid, 'drain-once');
    await lost;
    expect(first.status, JSON.stringify(first.json)).toBe(504);
    expect(first.json.error.code).toBe('outcome_unknown');
    expect(first.retryAfter).toBeNull();
    const stored = await h.sql<{ operation_id: string }>('select operation_id from operations where cluster_uid = $1', [c.uid]);
    expect(stored, 'the statement committed').toHaveLength(1);
    const again = await postOperation(c.uid, 'drain-once');
    expect(again.status).toBe(202);
    expect(again.replayed).toBe('true');
    expect(again.json.operation_id).toBe(stored[0]?.operation_id);
  }, 30_000);

  it('answers 503 "retry" when the database ended the statement past its deadline, and the write is never applied', async () => {
    const c = await h.newCluster('outcome-refused');
    // The cluster row held past the write's deadline (PG_QUERY_TIMEOUT_MS, 1.5 s here).
    const locker = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
    await locker.connect();
    let res: { status: number; json: any };
    try {
      await locker.query('begin');
      await locker.query('select 1 from clusters where uid = $1 for update', [c.uid]);
      res = await h.admin('PUT', `/clusters/${c.uid}/deployments/held`, desired({ max_replicas: 3 }));
      await sleep(500);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    expect(res.status, JSON.stringify(res.json)).toBe(503);
    expect(res.json.error.code).toBe('unavailable');
    await sleep(500);
    expect(await h.sql('select 1 from desired_deployments where cluster_uid = $1', [c.uid]), 'not applied').toEqual([]);
  }, 30_000);

  it('answers 504 applied, not 503 "retry", when the write committed and the read of the answer failed: a disable is not reported as not applied', async () => {
    const c = await h.newCluster('outcome-applied');
    // The cluster view read after the disable waits on a table only it reads, past its deadline.
    const locker = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
    await locker.connect();
    let res: { status: number; json: any };
    try {
      await locker.query('begin');
      await locker.query('lock table observed_clusters in access exclusive mode');
      res = await h.admin('POST', `/clusters/${c.uid}/disable`);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    expect(res.status, JSON.stringify(res.json)).toBe(504);
    expect(res.json.error.code).toBe('applied');
    expect((await h.sql<{ disabled: boolean }>('select disabled_at is not null as disabled from clusters where uid = $1', [c.uid]))[0]?.disabled).toBe(true);
    const back = await h.admin('GET', `/clusters/${c.uid}`);
    expect(back.json.disabled).toBe(true);
  }, 30_000);
});
