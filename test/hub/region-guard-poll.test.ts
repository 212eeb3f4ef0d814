/**
 * A gateway shard polls the fleet only of its own region's database. The Worker refuses every
 * request once DATABASE_URL names another region's database (database-region-claim.test.ts), but
 * the gateway shards' alarms were never requests: a region whose secret was set to another
 * region's URL by mistake kept its shards' polls running there, and each of the other region's
 * live sessions it found due for a sweep it poked at an object of its own, which carries no such
 * session and so took it out of the fleet poll (leaveFleetPoll). The other region's session, still
 * connected, then got no desired state: writes poke only sessions in the poll, and nothing else
 * brought the change until it reconnected.
 *
 * Real workerd (two hubs: this region's, and an `east` region's restarted on its own storage with
 * this region's DATABASE_URL), real Postgres.
 */
import { afterAll, describe, expect, inject, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { copyDatabase } from '../../scripts/lib/dev-stack';
import { pgClient } from '../../scripts/lib/pg-node';
import { startHub, type Hub } from '../e2e/support/worker';
import { fileDatabaseUrl } from '../support/file-database';
import { desired, uniqueName } from '../support/peer-core';
import { connectTo, eventually, FAST_TIMERS, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const EMBEDDED = inject('embeddedPostgres');
// One shard, so the other region's poller reads the shard this region's session is in; a sweep
// period of a second, so a session is due for one every second or two.
const SHARED = { ...FAST_TIMERS, DB_GATEWAY_SHARDS: '1', LIVE_SWEEP_MS: '1000', HISTORY_PRUNE_INTERVAL_MS: '1000' };
const lines = captureHubLines();
const h = useHub(SHARED);

describe.skipIf(EMBEDDED)("a gateway given another region's database", () => {
  const persist = mkdtempSync(join(tmpdir(), 'wingsmith-east-'));
  let eu: Hub | null = null;
  afterAll(async () => {
    await eu?.stop();
    rmSync(persist, { recursive: true, force: true });
  }, 60_000);

  it("polls nothing there: the other region's live session stays in its fleet poll and gets its desired state", async () => {
    // This region's cluster and its live session.
    const home = await h.newCluster('home');
    const { peer, sessionId } = await h.openFresh(home);
    // An operator's pings: the silence rule must not be what ends the session.
    const pinger = setInterval(() => peer.isClosed || peer.send('ping', {}), 500);
    const live = async () => (await h.sql('select 1 from live_sessions where session_id = $1', [sessionId])).length === 1;
    await eventually(live, 5_000);

    // The east region on its own database, with a live session of its own: its shard's poller runs.
    const euDb = await copyDatabase(inject('databaseUrl'), inject('pgWsProxy'), inject('databaseTemplate')!);
    const c = pgClient(euDb, inject('pgWsProxy'));
    await c.connect();
    try {
      await c.query(`insert into hub_region (region) values ('east')`);
    } finally {
      await c.end();
    }
    // A region without a jurisdiction: local workerd's emulated one cannot tell, after a restart,
    // that the objects it made before are its own (it refuses and deletes them).
    const euVars = { ...SHARED, HUB_REGION: 'east' };
    eu = await startHub({ persistDir: persist, vars: { ...euVars, DATABASE_URL: euDb } });
    const reg = await fetch(`${eu.url}/admin/clusters`, {
      method: 'POST',
      headers: { authorization: `Bearer ${eu.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: uniqueName('east') }),
    });
    const euCluster = (await reg.json()) as { name: string; enrollment_token: string };
    expect(reg.status, JSON.stringify(euCluster)).toBe(201);
    const euPeer = await connectTo(eu, euCluster.enrollment_token);
    await euPeer.hello({ cluster_id: euCluster.name });
    await sleep(1_000);
    // Stopped with its session open: its poller's alarm is armed when it starts again.
    await eu.stop();
    eu = null;
    euPeer.close();

    // The same east deployment, its secret now the default deployment's database.
    const before = lines.length;
    eu = await startHub({ persistDir: persist, vars: { ...euVars, DATABASE_URL: await fileDatabaseUrl() } });
    // Several of its polls and of this session's sweep periods.
    await sleep(5_000);
    expect(await live(), 'this region\'s live session is still in the fleet poll').toBe(true);
    const owner = await h.sql<{ session_id: string; connected: boolean }>('select session_id, connected from cluster_owners where cluster_uid = $1', [home.uid]);
    expect(owner).toEqual([{ session_id: sessionId, connected: true }]);
    // And a change reaches it live.
    const put = await h.admin('PUT', `/clusters/${home.name}/deployments/after-stray`, desired());
    expect(put.status, JSON.stringify(put.json)).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'after-stray', 5_000);
    // The east shard says why it does not poll, once.
    // Its first alarm after the start: on a loaded machine it may come after the checks above.
    const refusals = await eventually(async () => {
      const found = lines.slice(before).filter((l) => l.msg.startsWith('fleet poll stopped'));
      return found.length > 0 && found;
    }, 15_000);
    await sleep(500);
    expect(lines.slice(before).filter((l) => l.msg.startsWith('fleet poll stopped'))).toHaveLength(1);
    expect(refusals).toEqual([expect.objectContaining({ level: 'error', error: expect.stringContaining('this is the database of region (default)') })]);
    clearInterval(pinger);
    peer.close();
  }, 120_000);
});
