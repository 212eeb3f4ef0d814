/**
 * Idle sessions sleep, proved at the spec's timers (5 s fleet poll, 10 s ping, 30 s silence) with
 * the SDK on the other end. An idle session's object is evicted while its operator keeps pinging
 * (the runtime answers the canonical pings; the object's wake counter shows it), and a sleeping
 * session still gets desired state, is cut by a token rotation and by a displacement within one
 * poll interval (the claim's direct poke of the displaced session is switched off here, so the
 * poll alone must do it), and resumes with both sequences continuing. A silent operator's 4408 at
 * 30 s is in test/hub/real-timers.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import { SeededRandom, suiteSeed } from './support/rng';

// The spec's timers (nothing overridden but retention and the test's own switch).
const e = useE2E({ RETENTION_MS: '600000', DISPLACEMENT_POKE: 'off' });
const SEED = suiteSeed(0x5ee9);
/** Local workerd evicts an object about 10 s after its last event. */
const IDLE_FOR_EVICTION_MS = 25_000;

interface Live {
  instance: string;
  replay_buffer_frames: number;
  wakes: { total: number; constructions: number; by_kind: Record<string, number> };
}

async function live(name: string): Promise<Live> {
  const view = await e.admin.must('GET', `/clusters/${name}`, 200);
  const session = view.session as { source: string; live: Live } | null;
  if (session?.source !== 'object') throw new Error('the session object did not answer');
  return session.live;
}

/** A connected operator for a new cluster, converged and then left idle. */
async function idleOperator(prefix: string, viaProxy = false) {
  const rng = new SeededRandom(SEED + prefix.length);
  const reg = await e.register(prefix);
  const sim = e.cluster(reg.name, { shape: { nodes: 2, gpusPerNode: 2, seed: 3 } });
  const proxy = viaProxy ? await e.proxy() : null;
  await sim.startOperator({
    hubUrl: proxy ? proxy.url : e.hub.url,
    token: reg.token,
    storage: { kind: 'none' },
    // The spec's liveness: the SDK takes the ping cadence and silence limit from the welcome.
    tuning: { ...E2E_CLIENT, random: rng.fn() },
  });
  await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false });
  await until('the hub to hold nothing unacknowledged', async () => (await live(reg.name)).replay_buffer_frames === 0, 15_000);
  // And to have heard the operator's latest counters: the reports its first snapshot superseded
  // are counted, and told in a link.stats up to statsIntervalMs later (later still on a loaded
  // machine), which would otherwise land in the idle window as a wake.
  await until(
    "the hub to have the operator's latest link counters",
    async () => {
      const view = await e.admin.must('GET', `/clusters/${reg.name}`, 200);
      const link = view.link as { replaced_frames?: number; evicted_frames?: number; dropped_events?: number } | null;
      const q = sim.client.stats.queue;
      return link?.replaced_frames === q.replacedFrames && link?.evicted_frames === q.evictedFrames && link?.dropped_events === q.droppedEvents;
    },
    15_000,
  );
  return { reg, sim, proxy };
}

describe.concurrent(`idle sessions at the spec's timers (seed ${SEED})`, () => {
  it('an idle session is evicted while its operator pings; desired state still reaches it, and a resume continues both sequences', async () => {
    const { reg, sim, proxy } = await idleOperator('sleep', true);
    const before = await live(reg.name);
    await sleep(IDLE_FOR_EVICTION_MS);
    const after = await live(reg.name);
    // Constructed again: the object left memory while the connection stayed open.
    expect(after.instance).not.toBe(before.instance);
    expect(after.wakes.constructions).toBeGreaterThan(before.wakes.constructions);
    // The operator pinged 2–3 times meanwhile; the runtime answered them without waking the object.
    expect((after.wakes.by_kind.message ?? 0) - (before.wakes.by_kind.message ?? 0)).toBe(0);
    expect(sim.client.state).toBe('open');

    await e.admin.putDesired(reg.name, 'late', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    await until('the desired change at the operator', () => sim.model.toJSON().deployments.some((d) => d.desired.deployment_id === 'late'), 10_000);

    // The link drops; the operator comes back into the same session, and both streams go on numbering.
    const session = String(sim.client.session.sessionId);
    const tap = sim.tap.sessions.get(session);
    const lastHub = tap?.received.at(-1)?.seq ?? 0;
    const lastOp = Math.max(0, ...[...sim.tap.sentFrames()].filter((f) => f.session === session).map((f) => f.seq));
    proxy?.cutAll();
    await until('a resumed welcome', () => sim.tap.welcomes.length >= 2 && sim.client.state === 'open', 15_000);
    expect(sim.tap.welcomes.at(-1)).toMatchObject({ session_id: session, full_resync: false });
    await e.admin.putDesired(reg.name, 'after-resume', desiredBody({ min_replicas: 1, max_replicas: 1 }));
    sim.model.flipRandomGpu();
    await until('the next hub frame', () => (tap?.received.at(-1)?.seq ?? 0) > lastHub, 10_000);
    expect(tap?.received.find((f) => f.seq === lastHub + 1)).toBeDefined();
    await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false });
    const nextOp = [...sim.tap.sentFrames()].filter((f) => f.session === session && f.seq > lastOp).map((f) => f.seq);
    // The resumed session carried the operator's reports of the changes above, numbered on from its last seq.
    expect(nextOp.length).toBeGreaterThan(0);
    expect(Math.min(...nextOp)).toBe(lastOp + 1);
    expect(sim.client.stats.freshSessions).toBe(1);
  }, 90_000);

  it('a token rotation cuts a sleeping session within one 5 s poll interval', async () => {
    const { reg, sim } = await idleOperator('rotate');
    await sleep(IDLE_FOR_EVICTION_MS);
    const t0 = Date.now();
    await e.admin.rotateToken(reg.name);
    await until('the 4403', () => sim.tap.closes(4403).length > 0, 15_000);
    expect(Date.now() - t0).toBeLessThan(5_000 + 2_000);
  }, 90_000);

  it('a displacement is cut within one 5 s poll interval even when the direct poke is lost', async () => {
    const { reg, sim } = await idleOperator('displace');
    await sleep(IDLE_FOR_EVICTION_MS);
    // The displaced operator stops at its 4409 (else the two would take turns).
    let cutAt = 0;
    sim.client.on('closed', (c) => {
      if (c.code !== 4409 || cutAt) return;
      cutAt = Date.now();
      void sim.stopOperator({ graceful: false });
    });
    const newer = e.cluster(reg.name, { shape: { nodes: 1, gpusPerNode: 1, seed: 4 } });
    const t0 = Date.now();
    await newer.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: { kind: 'none' }, tuning: E2E_CLIENT });
    await until('the older operator to be displaced', () => cutAt > 0, 15_000);
    expect(cutAt - t0).toBeLessThan(5_000 + 2_000);
  }, 90_000);
});
