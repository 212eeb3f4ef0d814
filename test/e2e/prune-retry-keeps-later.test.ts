/**
 * Against the real hub: a fresh session's resync (resync.begin, the deployments, stream.end
 * {complete: true}) whose pruneDesired fails transiently, and a deployment created on the plane
 * while the prune waits for its retry. The hub sends the new deployment after its stream.end, as
 * an ordinary change, and the SDK applies it behind the failed prune. The retried prune used to
 * prune against the snapshot's ids alone and deleted the new deployment, which the hub does not
 * send again: the cluster lost a deployment the plane still wants until the next full resync.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { OperatorClient } from '../../src/operator/client';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { applied, transient } from '../../src/operator/handlers';
import { memoryLogger } from '../../src/operator/logger';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();
const clients: OperatorClient[] = [];
afterAll(async () => {
  for (const c of clients) await c.stop({ graceful: false });
});

describe('a hub snapshot whose prune is retried', () => {
  it('keeps a deployment the hub created and delivered after the snapshot, while the prune waited for its retry', async () => {
    const reg = await e.register('prune-retry');
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    const local = new Set<string>(['stale']);
    let pruneAttempts = 0;
    const client = new OperatorClient({
      url: e.hub.url,
      token: reg.token,
      clusterId: reg.name,
      operatorVersion: '0.1.0',
      cursorStore: new MemoryCursorStore(),
      logger: memoryLogger(),
      ...E2E_CLIENT,
      // Room for the plane's write to reach the operator before the prune's retry.
      retry: { baseMs: 3_000, capMs: 3_000 },
      snapshot: () => ({ nodes: [], devices: [], deployments: [] }),
      handlers: {
        desired: (p) => {
          if (p.deleted) local.delete(p.deployment_id);
          else local.add(p.deployment_id);
          return applied();
        },
        pruneDesired: (keep) => {
          pruneAttempts++;
          if (pruneAttempts === 1) return transient('apiserver: connection refused');
          for (const id of [...local]) if (!keep.has(id)) local.delete(id);
          return applied();
        },
        operation: () => ({ outcome: 'succeeded' }),
      },
    });
    clients.push(client);
    await client.start();
    await until('the first prune attempt', () => pruneAttempts === 1);
    await e.admin.putDesired(reg.name, 'e1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await until('e1 applied behind the failed prune', () => local.has('e1'));
    await until('the retried prune', () => pruneAttempts === 2, 10_000);
    await sleep(50);
    expect([...local].sort()).toEqual(['d1', 'e1']);
  });
});
