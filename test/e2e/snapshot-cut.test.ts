/**
 * A graceful stop that lands inside a hub snapshot (its resync.begin applied, its stream.end not)
 * records `hubSnapshotOpen`, so the next process says lossy and a fresh session brings a whole
 * snapshot to prune against. The note stays in the record until a fresh session supersedes it: a
 * process that never reaches the hub (the hub down, a rollout rolled back) and stops again must
 * not erase it with its own saves. It did (its first save wrote `hubSnapshotOpen: false`), and the
 * process after it resumed the session (the file stores vouch for the buffer), the hub replayed a
 * stream.end nobody had open, and a deployment withdrawn while no operator listened was never
 * pruned from the cluster. Found by a review of the stop path.
 */
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();
async function deadUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

describe('a hub snapshot cut by a graceful stop', () => {
  it('the lossy note survives a process that never reached the hub: the withdrawn deployment is pruned', async () => {
    const reg = await e.register('stop-snap');
    const sim = e.cluster(reg.name);
    const tuning = { ...E2E_CLIENT };
    const has = (id: string) => sim.model.snapshot().deployments.some((d) => d.deployment_id === id);
    const record = async (dir: string) => JSON.parse(await readFile(path.join(dir, 'cursor.json'), 'utf8')) as Record<string, unknown>;

    // An operator with no durable state puts d1 and d2 on the cluster.
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await e.admin.putDesired(reg.name, 'd2', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false });
    await sim.stopOperator({ graceful: true });
    // Withdrawn while no operator runs: only a hub snapshot's prune can take it off the cluster now.
    await e.admin.deleteDesired(reg.name, 'd2');

    // A new operator with file stores: a fresh session, whose hub snapshot is [begin, d1, end].
    // The stop lands before its stream.end (dropped on the way in, as if still in flight).
    const dir = await e.tempDir('wingsmith-e2e-snapcut-');
    let endDropped = false;
    sim.tap.onceIn((f) => {
      if (f.type !== 'stream.end') return undefined;
      endDropped = true;
      return null;
    });
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'files', dir }, tuning });
    await until('the hub snapshot begun and its stream.end in flight', () => endDropped && has('d1'));
    await sleep(200);
    const session = sim.client.session.sessionId;
    await sim.stopOperator({ graceful: true });
    const afterStop = await record(dir);
    // Preconditions: the stop was inside the snapshot and the record says so.
    expect({ hubSnapshotOpen: afterStop.hubSnapshotOpen, session: afterStop.sessionId, d2: has('d2') }).toEqual({
      hubSnapshotOpen: true,
      session,
      d2: true,
    });

    // The next process cannot reach the hub and is stopped again.
    await sim.startOperator({ hubUrl: await deadUrl(), token: reg.token, storage: { kind: 'files', dir }, tuning });
    await sleep(400);
    await sim.stopOperator({ graceful: true });
    const afterUnreached = await record(dir);

    // The one after it reaches the hub.
    const firstLink = sim.tap.links.length;
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'files', dir }, tuning });
    const pruned = await until('d2 pruned from the cluster', () => !has('d2'), 10_000).then(
      () => true,
      () => false,
    );
    const hello = sim.tap.links[firstLink]?.hello;
    expect({ recordAfterUnreachedProcess: afterUnreached.hubSnapshotOpen, nextHelloLossy: hello?.lossy, d2Pruned: pruned }).toEqual({
      recordAfterUnreachedProcess: true,
      nextHelloLossy: true,
      d2Pruned: true,
    });
  });
});
