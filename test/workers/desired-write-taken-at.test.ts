/**
 * A desired write's wait bounds count from when the Worker took it, as a registry write's do (and
 * a session's claim from when the session asked for it):
 * counted from its arrival at the gateway shard, a call held up on its way there got a fresh
 * deadline, and could commit after the Worker had answered the caller 504 (and the caller had
 * repeated the write: the repeat then overwritten by the late one). Here the hold-up is a
 * `takenAt` a minute old, as a call stalled that long would carry (found by review of the admin
 * API's writes).
 */
import { describe, expect, it } from 'vitest';
import { pollShardOf } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { gatewayClaim, gatewayWriteDesired } from '../../src/hub/db/gateway-client';
import { hashToken, toHex } from '../../src/hub/tokens';
import { claimArgs } from '../support/claim-args';
import { desired, hubEnv, newCluster, sql } from './support/peer';

const item = (id: string) => ({ deployment_id: id, ...desired() });
const revision = async (uid: string) => Number((await sql<{ r: string }>('select desired_revision as r from clusters where uid = $1', [uid]))[0]?.r);
const ids = async (uid: string) => (await sql<{ deployment_id: string }>('select deployment_id from desired_deployments where cluster_uid = $1 order by 1', [uid])).map((r) => r.deployment_id);

describe('a desired write taken long before it reaches its gateway shard', () => {
  it('writes nothing, whether a single PUT (coalesced), a bulk PUT, a withdrawal or an operation', async () => {
    const c = await newCluster('taken-at');
    // A write taken now goes through, as ever.
    await gatewayWriteDesired(hubEnv, { op: 'put', cluster: c.uid, items: [item('fresh')] });
    const before = await revision(c.uid);
    const stale = Date.now() - 60_000;
    const writes = [
      { op: 'put' as const, cluster: c.uid, items: [item('late-single')], takenAt: stale },
      { op: 'put' as const, cluster: c.uid, items: [item('late-a'), item('late-b')], takenAt: stale },
      { op: 'withdraw' as const, cluster: c.uid, deploymentId: 'fresh', takenAt: stale },
      {
        op: 'operation' as const,
        cluster: c.uid,
        operation: { operation_id: crypto.randomUUID(), kind: 'node.drain' as const, target: 'n1', params: {}, deadline_s: 60 },
        takenAt: stale,
      },
    ];
    for (const w of writes) await expect(gatewayWriteDesired(hubEnv, w), w.op).rejects.toThrow();
    expect(await revision(c.uid)).toBe(before);
    expect(await ids(c.uid)).toEqual(['fresh']);
    expect(await sql('select 1 from operations where cluster_uid = $1', [c.uid])).toEqual([]);
  });
});

describe('a claim asked for long before it reaches its gateway shard', () => {
  it('takes nothing: the cluster stays unclaimed, where one asked for now is granted', async () => {
    const c = await newCluster('claim-taken-at');
    const cfg = hubConfig(hubEnv);
    const tokenHashHex = toHex(await hashToken(c.token));
    const args = (takenAt?: number) =>
      claimArgs(c.uid, tokenHashHex, { ...(takenAt === undefined ? {} : { takenAt }), pollShard: pollShardOf(c.uid, cfg.DB_GATEWAY_SHARDS) });
    const owners = () => sql('select session_id from cluster_owners where cluster_uid = $1', [c.uid]);
    await expect(gatewayClaim(hubEnv, args(Date.now() - 60_000), 0)).rejects.toThrow();
    expect(await owners()).toEqual([]);
    const granted = await gatewayClaim(hubEnv, args(), 0);
    expect(granted.refusal).toBeNull();
    expect(await owners()).toHaveLength(1);
  });
});
