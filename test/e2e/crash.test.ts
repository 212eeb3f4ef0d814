/**
 * Operator crash versus graceful restart. A crash is the process vanishing: no `stop()`, nothing
 * more saved, its connection dropped at the network. The cluster (the model, standing in for
 * Kubernetes and the CRDs) lives on and keeps changing; a new operator process starts on it.
 *
 * - Cursor record survives, outbound buffer in memory: the operator cannot prove its replay
 *   buffer survived, so hello says lossy and the hub grants a fresh session with full resync.
 * - FileCursorStore + FileOutboundLog: every frame the hub can have seen is on disk, so the
 *   restart resumes (lossy false, same session) and replays what was unacknowledged.
 * - Graceful stop: acks drained first, so even with the in-memory buffer the restart resumes.
 */
import { describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E();
const SEED = suiteSeed(0xc4a54);
describe(`operator crash versus graceful restart (seed ${SEED})`, () => {
  it('crash with an in-memory outbound buffer: the next hello is lossy, the hub grants a fresh session, both sides resync and the plane converges', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('crash-mem');
    const proxy = await e.proxy();
    const sim = e.cluster(reg.name);
    const cursorStore = new MemoryCursorStore();
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 3 }));
    await converge(e.query, { uid: reg.uid, cluster: sim });
    const before = sim.client.session.sessionId;

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 250, deployments: ['d1', 'd2'] });
    churn.start();
    await sleep(300);
    // Hold the hub's acks back so the crash leaves frames unacknowledged in the buffer it loses.
    proxy.blackhole(true, 'down');
    await sleep(300);
    expect(sim.client.stats.unacked).toBeGreaterThan(0);
    await sim.crashOperator(() => proxy.cutAll());
    proxy.blackhole(false, 'down');
    await sleep(300); // the cluster keeps changing with no operator
    const firstOfSecond = sim.tap.links.length;
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await sleep(500);
    await churn.stop();

    await converge(e.query, { uid: reg.uid, cluster: sim, operationsRunOnce: true, expectFullPlacement: false }, { timeoutMs: 30_000 });
    const link = sim.tap.links[firstOfSecond];
    expect(link?.hello).toMatchObject({ session_id: before, lossy: true });
    expect(link?.welcome).toMatchObject({ full_resync: true });
    expect(link?.welcome?.session_id).not.toBe(before);
    expect(sim.client.session.sessionId).not.toBe(before);
    expect(sim.client.stats.freshSessions).toBe(1);
  });

  it('crash with FileCursorStore and FileOutboundLog: the restart resumes the same session without a resync and replays exactly what was unacknowledged; an operation the crash interrupted is concluded failed, once', async () => {
    const rng = new SeededRandom(SEED + 1);
    const reg = await e.register('crash-file');
    const proxy = await e.proxy();
    // Slow operation steps: the prefetch below is still running when the process dies.
    const sim = e.cluster(reg.name, { stepMs: 400 });
    const dir = await e.tempDir('wingsmith-e2e-op-');
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'files', dir }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 3 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    const session = sim.client.session.sessionId;

    const op = await e.admin.startOperation(reg.name, 'model.prefetch', 'meta-llama/Llama-3.1-70B-Instruct');
    await until('the operation to be accepted', () => [...sim.tap.sentFrames()].some((f) => f.type === 'operation.accepted' && f.payload.operation_id === op));
    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(300);
    proxy.blackhole(true, 'down');
    await sleep(300);
    const zombie = sim.operator;
    const unackedAtCrash = sim.client.stats.unacked;
    expect(unackedAtCrash).toBeGreaterThan(0);
    await sim.crashOperator(() => proxy.cutAll());
    proxy.blackhole(false, 'down');
    const lastSentByZombie = Math.max(...(sim.tap.sessions.get(String(session))?.sent.keys() ?? [0]));
    await sleep(300);
    const firstOfSecond = sim.tap.links.length;
    await sim.startOperator({ hubUrl: proxy.url, token: reg.token, storage: { kind: 'files', dir }, tuning });
    await sleep(500);
    await churn.stop();

    await converge(e.query, target, { timeoutMs: 30_000 });
    expect(sim.operator).not.toBe(zombie);
    const link = sim.tap.links[firstOfSecond];
    expect(link?.hello).toMatchObject({ session_id: session, lossy: false });
    expect(link?.welcome).toMatchObject({ session_id: session, full_resync: false });
    expect(sim.client.session.sessionId).toBe(session);
    expect(sim.client.stats.freshSessions).toBe(0);
    expect(sim.tap.welcomes.filter((w) => w.full_resync === true)).toHaveLength(1);
    // Numbering continued past what the dead process had sent: nothing renumbered, nothing skipped.
    const seqs = [...(sim.tap.sessions.get(String(session))?.sent.keys() ?? [])].sort((a, b) => a - b);
    expect(seqs[seqs.length - 1]).toBeGreaterThan(lastSentByZombie);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    const opRow = await e.query<{ state: string; outcome_message: string }>('select state, outcome_message from operations where operation_id = $1', [op]);
    expect(opRow[0]?.state).toBe('failed');
    expect(opRow[0]?.outcome_message).toMatch(/restarted/);
  });

  it('graceful stop drains acknowledgements first: the restart resumes the same session without a resync, even with the in-memory buffer', async () => {
    const rng = new SeededRandom(SEED + 2);
    const reg = await e.register('graceful');
    const sim = e.cluster(reg.name);
    const cursorStore = new MemoryCursorStore();
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);
    const session = sim.client.session.sessionId;

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 30, desiredEveryMs: 0, deployments: ['d1'] });
    churn.start();
    await sleep(400);
    // The stop happens mid-stream: frames are in flight and unacknowledged when it is asked for.
    await sim.stopOperator({ graceful: true });
    expect(cursorStore.peek()?.clean).toBe(true);
    expect(sim.tap.links[sim.tap.links.length - 1]?.close?.code).toBe(1000);
    await sleep(300);
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await sleep(300);
    await churn.stop();

    await converge(e.query, target);
    const last = sim.tap.links[sim.tap.links.length - 1];
    expect(last?.hello).toMatchObject({ session_id: session, lossy: false });
    expect(last?.welcome).toMatchObject({ session_id: session, full_resync: false });
    expect(sim.client.stats.freshSessions).toBe(0);
  });

  it('what the stopping process applied and never reported reaches the hub from the next one: a resumed session opens with an observed snapshot', async () => {
    // Found by a soak (seed 67): the hub's delete of a deployment arrived while the operator was
    // shutting down; the handler applied it and the ack went out, but the informers had stopped,
    // so no deployment.removed was ever sent, and the next process's re-list reports only what
    // exists. The hub kept a deployment the cluster no longer ran until a full resync.
    const rng = new SeededRandom(SEED + 3);
    const reg = await e.register('stop-unreported');
    const sim = e.cluster(reg.name);
    const cursorStore = new MemoryCursorStore();
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await e.admin.putDesired(reg.name, 'd2', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    const target = { uid: reg.uid, cluster: sim, expectFullPlacement: false };
    await converge(e.query, target);
    const session = sim.client.session.sessionId;

    // Shutdown has begun: the informers stop first (as stopProcess does), then the delete lands.
    sim.model.detach();
    await e.admin.deleteDesired(reg.name, 'd2');
    await until('the delete applied to the cluster', () => !sim.model.snapshot().deployments.some((d) => d.deployment_id === 'd2'));
    await sim.stopOperator({ graceful: true });
    expect(cursorStore.peek()?.clean).toBe(true);
    const stillShown = await e.query('select deployment_id from observed_deployments where cluster_uid = $1', [reg.uid]);
    expect(stillShown.map((r) => r.deployment_id).sort()).toEqual(['d1', 'd2']);

    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'memory', cursorStore }, tuning });
    await converge(e.query, target);
    const last = sim.tap.links[sim.tap.links.length - 1];
    expect(last?.welcome).toMatchObject({ session_id: session, full_resync: false });
    expect(sim.client.stats.freshSessions).toBe(0);
    expect(sim.client.stats.resyncsSent).toBe(1);
  });
});
