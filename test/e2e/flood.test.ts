/**
 * A flood of events under backpressure. Spec: "Operator → hub: Observed state is a snapshot of
 * the present, so when the queue is full the oldest frame of the same type and subject is
 * replaced, not appended. Falling behind degrades resolution, never correctness. Events are
 * exempt: they are dropped from the tail and the drop is counted and reported."
 *
 * The SDK's queue is tiny (16 frames), the hub keeps the operator's unacknowledged window small
 * (replay buffer of 32 frames) and the link is slow, so the writer falls behind a flood of events
 * interleaved with state changes.
 */
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, E2E_VARS, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E({ ...E2E_VARS, REPLAY_BUFFER_FRAMES: '32' });
const SEED = suiteSeed(0xf100d);

describe(`a flood of events under backpressure (seed ${SEED})`, () => {
  it('a state frame evicted from a full queue is observed again: the plane converges without waiting for a periodic resync (spec: "the sender will observe the state again")', async () => {
    const reg = await e.register('evicted');
    const sim = e.cluster(reg.name, { shape: { nodes: 4, gpusPerNode: 8 } });
    await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: { ...E2E_CLIENT, sendQueueCapacity: 16 } });
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true };
    await converge(e.query, target);
    const evictedBefore = sim.client.stats.queue.evictedFrames;
    // All in one tick, before the writer runs: GPU A's event and state, 14 events (the queue is
    // now full), then more GPUs: B's state evicts A's event, C's state evicts A's state. A random
    // pick can hit a GPU whose state is already queued (that replaces instead of evicting), so
    // flip more, still in the same tick, until a state frame has been evicted (a bounded few).
    sim.model.flipRandomGpu();
    for (let i = 0; i < 14; i++) sim.emitEvent('node', { subject: 'node-001', reason: 'Filler', message: String(i), severity: 'info' });
    for (let i = 0; i < 8 && sim.client.stats.queue.evictedFrames <= evictedBefore; i++) sim.model.flipRandomGpu();
    expect(sim.client.stats.queue.evictedFrames).toBeGreaterThan(evictedBefore);
    await converge(e.query, target, { timeoutMs: 10_000 });
  });

  it('events past the queue are dropped from the tail, counted, and reported in link.stats; every event sent is stored; observed state still converges', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('flood');
    const proxy = await e.proxy();
    proxy.delay(15);
    const sim = e.cluster(reg.name, { shape: { nodes: 4, gpusPerNode: 8 } });
    await sim.startOperator({
      hubUrl: proxy.url,
      token: reg.token,
      storage: { kind: 'none' },
      tuning: { ...E2E_CLIENT, sendQueueCapacity: 16, statsIntervalMs: 200, random: rng.fn() },
    });
    await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 2, max_replicas: 2 }));
    const target = { uid: reg.uid, cluster: sim, exactEvents: true, operationsRunOnce: true, expectFullPlacement: false };
    await converge(e.query, target);

    const nodes = sim.model.snapshot().nodes.map((n) => n.node_id);
    for (let burst = 0; burst < 12; burst++) {
      for (let i = 0; i < 250; i++) {
        sim.emitEvent('node', { subject: rng.pick(nodes), reason: 'FloodTest', message: `burst ${burst} event ${i}`, severity: 'info' });
        // State changes in the middle of the flood: the newest statement per subject must win.
        if (i % 50 === 0) sim.model.flipRandomGpu();
      }
      await sleep(rng.int(20, 80));
    }
    const dropped = sim.client.stats.queue.droppedEvents;
    expect(dropped).toBeGreaterThan(0);

    proxy.delay(0);
    await converge(e.query, target, { timeoutMs: 30_000 });
    // The counters reached the hub (link.stats), as the operator counts them.
    const q = sim.client.stats.queue;
    const ls = await until('link.stats to report the final counters', async () => {
      const rows = await e.query<{ epoch: string; dropped_events: string; evicted_frames: string; replaced_frames: string }>('select * from link_stats where cluster_uid = $1', [reg.uid]);
      const r = rows[0];
      return r && Number(r.dropped_events) === q.droppedEvents && Number(r.evicted_frames) === q.evictedFrames ? r : null;
    });
    expect(ls.epoch).toBe(sim.client.stats.epoch);
    expect(Number(ls.replaced_frames)).toBe(q.replacedFrames);
    const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
    expect(view.link).toMatchObject({ dropped_events: q.droppedEvents, evicted_frames: q.evictedFrames });
    // Every event is accounted for: stored, or dropped and counted (exactEvents in converge).
    expect(sim.eventsEmitted).toBeGreaterThan(3_000);
  });
});
