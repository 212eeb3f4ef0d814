/**
 * Found by the soak (seed 1, cycle 12): a desired change stayed in Postgres, never delivered to
 * a connected, healthy operator, for as long as nothing else happened on the session.
 *
 * Spec: "Hub → operator: Desired state must not be dropped." DESIGN decision 6: "the object also
 * picks up anything written by other plane components on its poll (a per-cluster revision)."
 *
 * The fetch of a change fails (in the soak: Postgres cut at the network; here: the table is briefly
 * unavailable, a failure the hub classifies as transient, since unsure means transient). The
 * session logs "will retry on the next poll", but the poll only pumped when the revision it read
 * was *higher* than the one it already knew, and it already knew this one, so once the database
 * was healthy again the change still waited, indefinitely, for an unrelated event (another change,
 * a reconnect). The hub's resync stream of a fresh session stalled the same way when a snapshot
 * page failed to load.
 *
 * Why not a lock: the embedded Postgres (PGlite) runs every connection in one backend, so a
 * transaction holding a lock there stalls every statement, the poll included; renaming the table
 * away and back fails exactly the desired-state reads, on both databases.
 */
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();

/** Make desired-state reads fail for `ms` (the table is renamed away), running `meanwhile` first. */
async function desiredUnavailable(ms: number, meanwhile: () => Promise<void> = async () => {}): Promise<void> {
  await e.query('alter table desired_deployments rename to desired_deployments_away');
  try {
    await meanwhile();
    await sleep(ms);
  } finally {
    await e.query('alter table desired_deployments_away rename to desired_deployments');
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
    // revision; meanwhile desired_deployments cannot be read, so the session's fetch fails.
    await e.query(
      `update desired_deployments set min_replicas = 2, max_replicas = 3,
         revision = (select desired_revision + 1 from clusters where uid = $1)
       where cluster_uid = $1 and deployment_id = 'd1'`,
      [reg.uid],
    );
    // Several ownership polls (300 ms): each sees the new revision, and each fetch fails.
    await desiredUnavailable(2_000, async () => {
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
    // The operator connects while the snapshot cannot be read: resync.begin goes out, the page fails.
    await desiredUnavailable(2_000, async () => {
      await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    });
    expect(sim.tap.welcomes[0]).toMatchObject({ full_resync: true });
    await converge(e.query, target, { timeoutMs: 10_000 });
  });
});
