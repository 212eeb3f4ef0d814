/**
 * A session's reads of desired state (the changes it owes its operator, the pages of a resync)
 * answer only while it still holds its claim on the cluster's current token of an enabled
 * cluster (db/desired.ts, whileClaimHeld). A session paging a large resync when its cluster is
 * disabled or its token rotated would otherwise read, and send, what the admin wrote after the
 * revocation in the moments before its check cuts it; a null answer makes it check at once.
 * Statement-level, on real Postgres.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { fetchDesiredChanges, fetchDesiredSnapshotPage, fetchFirstSnapshotPage } from '../../src/hub/db/desired';
import type { SessionFence } from '../../src/hub/db/ingest';
import type { Sql } from '../../src/hub/db/sql';
import { newId } from '../../src/protocol';
import { withFileSql as withSql } from '../support/file-database';
import { desired } from '../support/peer-core';

/** A cluster with two deployments and a session holding its claim (generation 1). */
async function claimed(sql: Sql): Promise<SessionFence> {
  const uid = newId();
  const tokenHash = randomBytes(32).toString('hex');
  const sessionId = `${newId()}.${newId()}`;
  await sql.query(`insert into clusters (uid, name, token_hash, token_issued_at, desired_revision) values ($1, $2, decode($3, 'hex'), now(), 2)`, [uid, `fence-${uid.toLowerCase()}`, tokenHash]);
  for (const [i, d] of ['a', 'b'].entries()) {
    await sql.query(
      `insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted)
       values ($1, $2, 'w', $3, 1, 2, $4::jsonb, false)`,
      [uid, d, i + 1, JSON.stringify(desired().serving)],
    );
  }
  await sql.query(`insert into cluster_owners (cluster_uid, session_id, generation, connected) values ($1, $2, 1, true)`, [uid, sessionId]);
  return { clusterUid: uid, sessionId, generation: 1, tokenHash };
}

async function reads(sql: Sql, fence: SessionFence) {
  const changes = await fetchDesiredChanges(sql, fence, 0, 100, 4 << 20);
  const snapshot = await fetchDesiredSnapshotPage(sql, fence, null, 100, 4 << 20);
  // The fresh session's first page, read by the gateway right behind the claim (claim-snapshot.ts).
  const first = await fetchFirstSnapshotPage(sql, fence, 2, 100, 4 << 20);
  return {
    changes: changes && changes.rows.map((c) => c.revision),
    snapshot: snapshot && snapshot.rows.map((d) => d.payload.deployment_id),
    first: first && first.deployments.map((d) => d.deployment_id),
  };
}

describe('desired-state reads answer only a session that holds its claim', () => {
  it('answer the owner; an empty read is an empty page, not a refusal', async () => {
    await withSql(async (sql) => {
      const f = await claimed(sql);
      expect(await reads(sql, f)).toEqual({ changes: [1, 2], snapshot: ['a', 'b'], first: ['a', 'b'] });
      expect((await fetchDesiredChanges(sql, f, 2, 100, 4 << 20))?.rows).toEqual([]);
    });
  });

  it('refuse (null) once the token is rotated, the cluster disabled, or the claim taken by a newer session', async () => {
    await withSql(async (sql) => {
      const rotated = await claimed(sql);
      await sql.query(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [rotated.clusterUid, randomBytes(32).toString('hex')]);
      const disabled = await claimed(sql);
      await sql.query('update clusters set disabled_at = now() where uid = $1', [disabled.clusterUid]);
      const displaced = await claimed(sql);
      await sql.query(`update cluster_owners set session_id = $2, generation = 2 where cluster_uid = $1`, [displaced.clusterUid, `${newId()}.${newId()}`]);
      const refused = { changes: null, snapshot: null, first: null };
      expect({ rotated: await reads(sql, rotated), disabled: await reads(sql, disabled), displaced: await reads(sql, displaced) }).toEqual({
        rotated: refused,
        disabled: refused,
        displaced: refused,
      });
    });
  });
});
