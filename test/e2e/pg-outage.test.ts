/**
 * Postgres outages during ingest, cut at the network: this hub reaches the database through a
 * WebSocket→TCP proxy the test owns (as test/hub/outage.test.ts does), taken down and brought
 * back on the same port while the SDK streams observed changes.
 */
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startPgWsProxy, type PgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { findProxyTarget } from '../hub/support/proxy-target';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, E2E_VARS, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

let pgProxy: PgWsProxy | null = null;
let port = 0;
let target = { host: '127.0.0.1', port: 5432 };

async function databaseUp(): Promise<void> {
  pgProxy = await startPgWsProxy({ target, port });
  port = pgProxy.port;
}
async function databaseDown(): Promise<void> {
  await pgProxy?.close();
  pgProxy = null;
}

const e = useE2E({ ...E2E_VARS }, async () => {
  target = await findProxyTarget(inject('databaseUrl'), inject('pgWsProxy'));
  await databaseUp();
  return { PG_WS_PROXY: `127.0.0.1:${port}` };
});
afterAll(databaseDown);
const SEED = suiteSeed(0x9607a6e);

describe(`Postgres outage during ingest (seed ${SEED}; spec: transient failure withholds the ack)`, () => {
  it('a short outage: frames are not acknowledged while the database is away, and apply without loss when it returns', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('pg-short');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(400);
    await databaseDown();
    // Whatever was committed before the cut has had time to be acknowledged; nothing after.
    await sleep(400);
    const session = String(sim.client.session.sessionId);
    const ackedAtCut = sim.tap.sessions.get(session)?.acked ?? 0;
    await sleep(800);
    const sentDuring = [...(sim.tap.sessions.get(session)?.sent.keys() ?? [])].filter((s) => s > ackedAtCut).length;
    expect(sentDuring).toBeGreaterThan(0);
    expect(sim.tap.sessions.get(session)?.acked).toBe(ackedAtCut);
    await databaseUp();
    await sleep(300);
    await churn.stop();

    await converge(e.query, target, { timeoutMs: 30_000 });
    expect(sim.client.stats.freshSessions).toBe(1);
  });

  it('a long outage: the stalled connection is closed, reconnects are turned away until the database returns, then the session resumes and converges', async () => {
    const rng = new SeededRandom(SEED + 1);
    const reg = await e.register('pg-long');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(300);
    await databaseDown();
    // Longer than the hole limit (2.5 s) plus the time to notice it.
    await until('the hub to give up on the stalled connection', () => sim.tap.links.length > 1, 15_000);
    await until('a reconnect to be turned away while the registry is unreachable', () => sim.tap.links.some((l) => l.close?.httpStatus === 503), 10_000);
    await databaseUp();
    await churn.stop();

    await converge(e.query, target, { timeoutMs: 30_000 });
    const firstClose = sim.tap.links[0]?.close;
    expect(firstClose?.code).toBe(1013);
    expect(sim.client.stats.freshSessions).toBe(1);
    expect(sim.tap.welcomes.filter((w) => w.full_resync === false).length).toBeGreaterThanOrEqual(1);
  });
});
