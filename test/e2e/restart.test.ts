/**
 * Hub restarts. The operator reaches the hub through a proxy that is re-pointed at the new hub,
 * as a Service would route to a new pod.
 *
 * - A different instance (fresh Durable Object storage): "a hub restart looks exactly like" a
 *   session the hub has no record of, so the next hello gets full_resync with a new session id,
 *   both sides stream their snapshot, and the plane converges.
 * - The same instance restarted on its storage: the session object is found again, so the
 *   operator resumes without a resync.
 */
import { describe, expect, it } from 'vitest';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E();
const SEED = suiteSeed(0x4e57a7);

describe(`hub restart (seed ${SEED})`, () => {
  it('a new hub instance knows no session: the operator gets a full resync with a new session id and the plane converges', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('restart-new');
    const proxy = await e.proxy();
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    const firstSession = sim.client.session.sessionId;

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 50, desiredEveryMs: 300, deployments: ['d1', 'd2'] });
    churn.start();
    await sleep(800);
    await e.restartHub({ keepState: false });
    await sleep(800);
    await churn.stop();

    await converge(e.query, target, { timeoutMs: 30_000 });
    const welcomes = sim.tap.welcomes;
    expect(welcomes.filter((w) => w.full_resync === true)).toHaveLength(2);
    expect(sim.client.session.sessionId).not.toBe(firstSession);
    expect(sim.client.stats.freshSessions).toBe(2);
    // The second fresh session came with a hub snapshot and an operator snapshot.
    const second = sim.tap.sessions.get(String(sim.client.session.sessionId));
    expect(second?.received[0]?.type).toBe('resync.begin');
    expect([...(second?.sent.values() ?? [])].some((f) => f.type === 'resync.begin')).toBe(true);
  });

  it('the same hub instance restarted on its storage finds the session again: the operator resumes without a resync', async () => {
    const rng = new SeededRandom(SEED + 1);
    const reg = await e.register('restart-same');
    const proxy = await e.proxy();
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 3 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    const session = sim.client.session.sessionId;

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 50, desiredEveryMs: 300, deployments: ['d1', 'd2'] });
    churn.start();
    await sleep(800);
    await e.restartHub({ keepState: true });
    await until('the operator to be back', () => sim.client.state === 'open' && sim.tap.links.length > 1);
    await sleep(800);
    await churn.stop();

    await converge(e.query, target, { timeoutMs: 30_000 });
    expect(sim.client.session.sessionId).toBe(session);
    expect(sim.client.stats.freshSessions).toBe(1);
    expect(sim.tap.welcomes.filter((w) => w.full_resync === true)).toHaveLength(1);
    expect(sim.tap.welcomes.length).toBeGreaterThan(1);
  });
});
