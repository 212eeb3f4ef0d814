/**
 * A rolling update where the two processes of one cluster are welcomed in the other order than
 * they dialled. The new replica dials first over a path that holds its frames; the old one, whose
 * link was just cut, dials after it over another and resumes its session; then the replica's hello
 * is let through, and its claim displaces the old session (4409). The survivor is the replica,
 * whose link was dialled first. A soak (seed 20261206) held such a cluster "not converged" for
 * 60 s: the checker's wire tap took the session of the link dialled last for the current one, the
 * displaced session whose last frames the hub never acked.
 */
import { describe, expect, it } from 'vitest';
import { Churn } from './support/churn';
import { converge } from './support/converge';
import { E2E_CLIENT, sleep, until, useE2E } from './support/e2e';
import { SeededRandom, suiteSeed } from './support/rng';

const e = useE2E();
const SEED = suiteSeed(0xd150de);

describe(`displacement welcomed in the other order than dialled (seed ${SEED})`, () => {
  it('the cluster converges to the replica whose link was dialled first and welcomed last', async () => {
    const rng = new SeededRandom(SEED);
    const reg = await e.register('disp-order');
    const sim = e.cluster(reg.name);
    const fast = await e.proxy();
    const slow = await e.proxy();
    const tuning = { ...E2E_CLIENT, random: rng.fn() };
    await sim.startOperator({ hubUrl: fast.url, token: reg.token, storage: { kind: 'none' }, tuning });
    await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false });
    const old = sim.operator!;
    let displaced = false;
    old.client.on('closed', (c) => {
      if (c.code !== 4409 || displaced) return;
      displaced = true;
      void sim.stopProcess(old, { graceful: false });
    });

    const churn = new Churn(rng, sim, e.admin, { observedEveryMs: 25, desiredEveryMs: 0, deployments: [] });
    churn.start();
    await sleep(200);
    // The replica's frames are held on their way to the hub until the old operator, cut now, has
    // dialled again and resumed (well within the hub's 1.5 s handshake limit, E2E_VARS): its hello
    // and claim land after that resume.
    slow.blackhole(true, 'up', 'hold');
    const before = sim.tap.links.length;
    const replica = await sim.startOperator({ hubUrl: slow.url, token: reg.token, storage: { kind: 'none' }, tuning, overlap: true });
    await until('the replica to dial', () => sim.tap.links.length > before, 5_000);
    const replicaLink = sim.tap.links.length; // links from here on were dialled after the replica's
    fast.cutAll();
    await until('the old operator resumed on a link dialled after the replica', () => sim.tap.links.slice(replicaLink).some((l) => l.welcome !== null), 5_000);
    slow.blackhole(false, 'up');
    await until('the replica welcomed and the old operator displaced', () => replica.client.state === 'open' && displaced, 10_000);
    await churn.stop();

    const resumed = sim.tap.links.slice(replicaLink).find((l) => l.welcome !== null);
    expect(resumed?.welcome?.['full_resync'], 'the old operator resumed its session').toBe(false);
    expect(sim.tap.links[replicaLink - 1]?.sessionId, 'the replica was welcomed on the link it dialled first').toBe(replica.client.session.sessionId);
    // The checker's view of the wire: the session of the latest welcome is the survivor's.
    expect(sim.tap.currentSession).toBe(replica.client.session.sessionId);
    await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false, exactEvents: false, operationsRunOnce: true }, { timeoutMs: 15_000 });
  }, 60_000);
});
