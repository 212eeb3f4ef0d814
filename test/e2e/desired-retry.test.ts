/**
 * Found by the soak (seed 1, cycle 12): a desired change stayed in Postgres, never delivered to
 * a connected, healthy operator, for as long as nothing else happened on the session.
 *
 * Spec: "Hub → operator: Desired state must not be dropped." DESIGN decision 6: "the object also
 * picks up anything written by other plane components on its poll (a per-cluster revision)."
 *
 * The fetch of a change fails transiently (here: a lock held on desired_deployments makes it time
 * out; in the soak it was Postgres cut at the network). The session logs "will retry on the next
 * poll", but the poll only pumps when the revision it reads is *higher* than the one it already
 * knows, and it already knows this one, so once the database is healthy again the change still
 * waits, indefinitely, for an unrelated event (another change, a reconnect). The hub's resync
 * stream of a fresh session stalls the same way when a snapshot page fails to load.
 */
import { describe, expect, inject, it } from 'vitest';
import { pgClient } from '../../scripts/lib/pg-node';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();

/** Hold an exclusive lock on desired_deployments for `ms` (the session's fetches time out at 1.5 s). */
async function lockDesired(ms: number, whileLocked: () => Promise<void> = async () => {}): Promise<void> {
  const locker = pgClient(inject('databaseUrl'), inject('pgWsProxy'));
  locker.on('error', () => undefined);
  await locker.connect();
  try {
    await locker.query('begin');
    await locker.query('lock table desired_deployments in access exclusive mode');
    await whileLocked();
    await sleep(ms);
    await locker.query('rollback');
  } finally {
    await locker.end().catch(() => undefined);
  }
}

describe('desired state after a transient fetch failure (spec: desired state must not be dropped)', () => {
  it('a change whose fetch failed transiently reaches the operator once the database is healthy, without waiting for another change or a reconnect', async () => {
    const reg = await e.register('fetch-retry');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true };
    await converge(e.query, target);

    // Another plane component changes the row, then announces it by bumping the cluster's
    // revision; meanwhile desired_deployments is locked, so the session's fetch times out.
    await e.query(
      `update desired_deployments set min_replicas = 2, max_replicas = 3,
         revision = (select desired_revision + 1 from clusters where uid = $1)
       where cluster_uid = $1 and deployment_id = 'd1'`,
      [reg.uid],
    );
    // Several ownership polls (300 ms): one sees the new revision, its fetch blocks and times out (1.5 s).
    await lockDesired(3_000, async () => {
      await e.query('update clusters set desired_revision = desired_revision + 1 where uid = $1', [reg.uid]);
    });

    // Healthy again: within a few poll intervals the change must be delivered and rendered.
    await converge(e.query, target, { timeoutMs: 10_000 });
  });

  it('a fresh session whose snapshot page failed to load transiently still gets the whole hub resync once the database is healthy', async () => {
    const reg = await e.register('resync-retry');
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const sim = e.cluster(reg.name);
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true };
    // The operator connects while the snapshot cannot be read: resync.begin goes out, the page times out.
    await lockDesired(3_000, async () => {
      await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    });
    expect(sim.tap.welcomes[0]).toMatchObject({ full_resync: true });
    await converge(e.query, target, { timeoutMs: 10_000 });
  });
});
