/**
 * Frames that reach an operator while it stops gracefully, against the real hub. Once `stop()`
 * has begun the SDK applies nothing more: what it has not applied it does not acknowledge, and
 * the hub replays it to the next process. An operation.start applied there would be accepted and
 * run with a signal nobody aborts (the running ones were already asked to stop), hold the drain to
 * its timeout, and outlive the process: with a cursor record the next process concluded it
 * `failed` ("restarted") though it was still running; with none the hub delivered it again and it
 * ran twice. Found by a review of the stop path after a soak found its observed-state twin (the
 * last test of crash.test.ts).
 *
 * The drain is held open by a running `replica.restart`, which finishes its step (1.5 s) whatever
 * its signal says; the late `model.prefetch` takes four steps.
 */
import { describe, expect, it } from 'vitest';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { converge } from './support/converge';
import { E2E_CLIENT, until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';
import type { Storage } from './support/sim-cluster';

const e = useE2E();
const CONCLUDED = new Set(['succeeded', 'failed', 'cancelled', 'deadline_exceeded']);

async function lateStartDuringDrain(prefix: string, storage: () => Storage, recorded: () => unknown = () => null) {
  const reg = await e.register(prefix);
  const sim = e.cluster(reg.name, { stepMs: 1_500 });
  const tuning = { ...E2E_CLIENT };
  await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: storage(), tuning });
  await e.admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 1 }));
  await converge(e.query, { uid: reg.uid, cluster: sim, expectFullPlacement: false });
  const replica = sim.model.snapshot().deployments.find((d) => d.deployment_id === 'd1')?.replica_ids[0];
  expect(replica).toBeTruthy();
  const session = String(sim.client.session.sessionId);

  const hold = await e.admin.startOperation(reg.name, 'replica.restart', String(replica));
  await until('the restart running', () => sim.operationRuns.get(hold) === 1);
  const stopping = sim.client;
  const stopped = sim.stopOperator({ graceful: true });
  const late = await e.admin.startOperation(reg.name, 'model.prefetch', 'meta-llama/Llama-3.1-8B-Instruct');
  await until('the late start delivered to the stopping process', () =>
    sim.tap.sessions.get(session)?.received.some((f) => f.type === 'operation.start' && f.payload.operation_id === late),
  );
  expect(stopping.state).toBe('stopping');
  await stopped;
  const runsByTheStopped = sim.operationRuns.get(late) ?? 0;
  // Read before the next process starts: it saves its own record at once.
  const saved = recorded();

  await sim.startOperator({ hubUrl: e.hub.url, token: reg.token, storage: storage(), tuning });
  const row = await until(
    'the late operation concluded at the hub',
    async () => {
      const r = (await e.query<{ state: string; outcome_message: string | null }>('select state, outcome_message from operations where operation_id = $1', [late]))[0];
      return r && CONCLUDED.has(r.state) ? r : null;
    },
    25_000,
  );
  return { sim, late, runsByTheStopped, row, saved };
}

describe('an operation.start that arrives during the graceful drain', () => {
  it('with a cursor record: not run by the stopping process; the stop stays clean, the next process resumes and runs it once', async () => {
    const cursorStore = new MemoryCursorStore();
    const r = await lateStartDuringDrain('stop-op-mem', () => ({ kind: 'memory', cursorStore }), () => cursorStore.peek());
    expect(r.runsByTheStopped).toBe(0);
    const saved = r.saved as ReturnType<MemoryCursorStore['peek']>;
    expect(saved?.clean).toBe(true);
    expect(saved?.operations.some((o) => o.operationId === r.late)).toBe(false);
    const next = r.sim.tap.links[r.sim.tap.links.length - 1];
    expect(next?.hello).toMatchObject({ lossy: false });
    expect(next?.welcome).toMatchObject({ full_resync: false });
    expect(r.row.state).toBe('succeeded');
    expect(r.sim.operationRuns.get(r.late)).toBe(1);
  });

  it('with no storage: the next process is a fresh session and runs it, once', async () => {
    const r = await lateStartDuringDrain('stop-op-none', () => ({ kind: 'none' }));
    expect(r.runsByTheStopped).toBe(0);
    expect(r.row.state).toBe('succeeded');
    expect(r.sim.operationRuns.get(r.late)).toBe(1);
  });
});
