/**
 * Token rotation and disablement mid-stream. Spec: whether the cluster may hold a session is
 * asked at hello and again on every ownership poll, so "disabling a cluster or rotating a leaked
 * token cuts a live session instead of waiting for the operator to reconnect" (error, then 4403).
 * The operator keeps retrying with backoff ("there is no maximum retry count") and keeps its
 * cluster's state meanwhile; once it may connect again it resumes or resyncs and converges.
 */
import { describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';
import type { LinkRecord, WireTap } from './support/wire-tap';

const e = useE2E();
const SEED = suiteSeed(0x70c3e);

/** The operator's welcomed, open link. */
function liveLink(sim: { tap: WireTap }): LinkRecord {
  const link = sim.tap.links[sim.tap.links.length - 1];
  if (!link || link.welcome === null || link.close !== null) {
    throw new Error(`no live session: links ${JSON.stringify(sim.tap.links.map((l) => ({ welcomed: l.welcome !== null, close: l.close })))}`);
  }
  return link;
}

describe(`token rotation and disablement mid-stream (seed ${SEED})`, () => {
  it('disabling the cluster cuts the live session (4403); the operator keeps retrying with backoff; after re-enabling it converges', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('disable');
    const sim = e.cluster(reg.name);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, random: rng.fn() } });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    let refusals = 0;
    sim.client.on('refused', () => refusals++);

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(300);
    // The live link is taken before the admin call: by the time a slow answer arrives, the cut
    // may be done and the operator's next (refused) attempt be the last link.
    const live = liveLink(sim);
    await e.admin.disable(reg.name);
    await until('the live session to be cut with 4403', () => live.close?.code === 4403, 10_000);
    // Refused again at every attempt while disabled: an error first, then 4403, and the operator tries again.
    await until('three more refused attempts', () => sim.tap.closes(4403).length >= 4, 15_000);
    const refusedAttempts = sim.tap.closes(4403).slice(1);
    for (const l of refusedAttempts) {
      expect(l.welcome).toBeNull();
      expect(l.handshakeError).toMatchObject({ retryable: false });
    }
    expect(refusals).toBeGreaterThanOrEqual(4);
    expect(sim.client.state === 'waiting' || sim.client.state === 'connecting' || sim.client.state === 'handshaking').toBe(true);

    await e.admin.enable(reg.name);
    await sleep(300);
    await churn.stop();
    await converge(e.query, target, { timeoutMs: 30_000 });
    expect(sim.client.state).toBe('open');
  });

  it('rotating the token cuts the live session (4403); the old token is refused at every retry; the operator restarted with the new token converges', async () => {
    const rng = new SeededRandom(SEED + 1);
    const reg = await e.register('rotate');
    const sim = e.cluster(reg.name);
    const cursorStore = new MemoryCursorStore();
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    const target = { uid: reg.uid, cluster: sim, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    const before = sim.client.session.sessionId;

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(300);
    const live = liveLink(sim);
    const newToken = await e.admin.rotateToken(reg.name);
    await until('the live session to be cut with 4403', () => live.close?.code === 4403, 10_000);
    await until('the old token to be refused three more times', () => sim.tap.closes(4403).length >= 4, 15_000);
    for (const l of sim.tap.closes(4403).slice(1)) expect(l.handshakeError).toMatchObject({ code: 'not_found', retryable: false });

    // The operator's secret is replaced and the process restarts with it; its cursor record survives.
    await sim.stopOperator({ graceful: true, timeoutMs: 1_000 });
    await sim.startOperator({ hubUrl: e.hub.url, token: newToken, storage: { kind: 'memory', cursorStore }, tuning });
    await sleep(300);
    await churn.stop();
    await converge(e.query, target, { timeoutMs: 30_000 });
    const last = sim.tap.links[sim.tap.links.length - 1];
    expect(last?.hello).toMatchObject({ session_id: before });
    expect(last?.welcome).not.toBeNull();
    expect(sim.client.state).toBe('open');
  });
});
