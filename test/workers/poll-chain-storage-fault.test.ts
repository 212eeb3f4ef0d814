/**
 * The fleet poll is a chain of alarms, each arming the next. The alarm reads which shard its
 * object polls from the object's storage, and read any failure of that read as "no session ever
 * registered here": it returned without arming the next, and the shard went unpolled (no
 * revocation, displacement or sweep delivered) until a claim there started it again. Only a
 * missing table means that now; any other failure retries at the next interval. Found by review
 * of the fleet poll; fails on the code before.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { gatewayStub, pollShardOf } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { connect, hubEnv, newCluster } from './support/peer';

describe('the fleet poll chain', () => {
  it('is armed again when the read of its shard fails, instead of ending', async () => {
    const c = await newCluster('poll-chain');
    const peer = await connect(c.token);
    expect((await peer.hello({ cluster_id: c.name })).type).toBe('welcome');
    const shard = pollShardOf(c.uid, hubConfig(hubEnv).DB_GATEWAY_SHARDS);
    // A poller rebuilt after an eviction (its shard not in memory), whose storage read then fails
    // once. The poll's own alarms (every 300 ms here) come to it: a test that ran the alarm itself
    // raced them, an alarm in the middle of its run leaving none pending to run.
    let failed = false;
    await runInDurableObject(gatewayStub(hubEnv, shard), (instance, state) => {
      (instance as unknown as { poller: { pollShard: number | null } }).poller.pollShard = null;
      const sql = state.storage.sql;
      const exec = sql.exec.bind(sql);
      sql.exec = ((query: string, ...bindings: unknown[]) => {
        if (!failed && query.includes('from poller')) {
          failed = true;
          throw new Error('SQLITE_IOERR: disk I/O error (simulated)');
        }
        return exec(query, ...bindings);
      }) as typeof sql.exec;
    });
    const until = async (what: string, ok: () => Promise<boolean> | boolean) => {
      for (const end = Date.now() + 5_000; !(await ok()); ) {
        if (Date.now() > end) throw new Error(`not within 5 s: ${what}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await until('a poll to meet the failing read', () => failed);
    // Armed again after it (a chain that ended there stays without an alarm for good).
    await until('the next poll to be armed', async () => (await runInDurableObject(gatewayStub(hubEnv, shard), (_i, state) => state.storage.getAlarm())) !== null);
    peer.close();
  });
});
