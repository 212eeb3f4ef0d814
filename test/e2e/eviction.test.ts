/**
 * Session object eviction with the SDK on the other end, at the spec's timers. Local workerd
 * evicts an idle Durable Object about 10 s after its last event while its WebSocket stays open
 * (the SDK's canonical pings are answered by the runtime meanwhile); the object is constructed
 * again on the next message and must carry on from its storage.
 */
import { describe, expect, it } from 'vitest';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E({ RETENTION_MS: '120000' });
const SEED = suiteSeed(0xe71c7);

async function instance(name: string): Promise<string> {
  const c = await e.admin.must('GET', `/clusters/${name}`, 200);
  const live = (c.session as { live?: { instance?: unknown } } | null)?.live;
  return String(live?.instance ?? '');
}

describe(`session object eviction (seed ${SEED})`, () => {
  it('after the idle object is evicted, the session carries on: observed and desired state converge with nothing lost and no resync', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('evict');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    const churn1 = new Churn(rng, sim, e.admin, { observedEveryMs: 40, desiredEveryMs: 300, deployments: ['d1', 'd2'] });
    churn1.start();
    await sleep(1_000);
    await churn1.stop();
    await converge(e.query, target);
    const before = await instance(reg.name);
    expect(before).not.toBe('');

    // Idle long enough for workerd to evict the object; its socket (and the SDK's link) stays open.
    await sleep(25_000);

    const churn2 = new Churn(rng, sim, e.admin, { observedEveryMs: 40, desiredEveryMs: 300, deployments: ['d1', 'd2'] });
    churn2.start();
    await sleep(1_000);
    await churn2.stop();
    await e.admin.putDesired(reg.name, 'd3', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await converge(e.query, target, { timeoutMs: 20_000 });

    // The object was constructed again (evicted), and the session went on without a resync. The
    // connection itself normally survives too (the hub suite's hibernation test asserts that on a
    // raw socket); if the runtime dropped it, the reconnect must have resumed.
    expect(await instance(reg.name)).not.toBe(before);
    expect(sim.client.stats.freshSessions).toBe(1);
    expect(sim.tap.welcomes.slice(1).every((w) => w.full_resync === false)).toBe(true);
  }, 90_000);
});
