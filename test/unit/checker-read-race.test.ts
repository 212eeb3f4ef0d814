/**
 * The convergence checker's "nothing acked is lost" against a plane read while the hub works:
 * `waitConverged` reads the plane (eleven statements, events the sixth), then finds the link
 * quiet. An event the hub commits after the events statement and acks before the quiet check is
 * in Postgres, yet absent from that read: held to the acks as they were when the read began, it
 * is checked at the next read instead of reported lost. An ack from before the read still holds
 * the read to the event. A soak (seed 53) once reported such an event lost; the race reproduces
 * it here with the real WireTap, waitConverged and checkInvariants, a scripted link and a query
 * that answers as Postgres would at the moment each statement runs.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, newId } from '../../src/protocol';
import type { TransportEvents } from '../../src/operator/transport';
import { checkInvariants, readPlane, waitConverged, type ConvergeTarget, type Query } from '../e2e/support/converge';
import type { SimCluster } from '../e2e/support/sim-cluster';
import { WireTap } from '../e2e/support/wire-tap';

const CLUSTER = { kubernetes_version: 'v1.31.2', provider: 'sim', region: 'local', labels: {} };

/** One operator link through the real WireTap, a session opened, frame 1 acked, an event sent as seq 2. */
function scripted() {
  const tap = new WireTap();
  let hub!: TransportEvents;
  const dial = tap.dialer((_req, ev) => {
    hub = ev;
    return { send: () => {}, close: () => {}, bufferedAmount: 0 };
  });
  const link = dial({ url: 'ws://hub/v1/connect', headers: {} }, { onOpen() {}, onMessage() {}, onClose() {} });
  const session = `${newId()}.${newId()}`;
  const limits = { ping_interval_s: 1, idle_timeout_s: 3, max_frame_bytes: 1 << 20, replay_buffer_frames: 1000, replay_buffer_bytes: 1 << 24 };
  hub.onMessage(buildFrame({ type: 'welcome', payload: { session_id: session, ack_seq: 0, full_resync: true, hub_version: 'dev', limits }, ack: 0 }), false);
  link.send(buildFrame({ type: 'cluster.observed', payload: CLUSTER, seq: 1, ack: 0 }));
  hub.onMessage(buildFrame({ type: 'ack', payload: {}, ack: 1 }), false);
  const eventId = newId();
  link.send(
    buildFrame({
      type: 'deployment.event',
      id: eventId,
      payload: { subject: 'd1', reason: 'InsufficientCapacity', message: 'placed 0 of 1', severity: 'warning', occurred_at: new Date().toISOString() },
      seq: 2,
      ack: 0,
    }),
  );
  const ack = (n: number) => hub.onMessage(buildFrame({ type: 'ack', payload: {}, ack: n }), false);

  // Postgres as the hub leaves it: the cluster row (seq 1), and the events it has committed.
  const events = new Set<string>();
  /** Runs while the plane read is at its last statement (rejections), once. */
  let duringRead: (() => void) | null = null;
  const query: Query = async <R,>(text: string) => {
    let rows: unknown[] = [];
    if (/from observed_clusters/.test(text)) rows = [{ ...CLUSTER, obs_session: session, obs_seq: 1 }];
    else if (/from events/.test(text)) rows = [...events].map((frame_id) => ({ frame_id }));
    else if (/from rejections/.test(text) && duringRead) {
      const run = duringRead;
      duringRead = null;
      run();
    }
    await new Promise((r) => setTimeout(r, 1)); // a round trip
    return rows as R[];
  };

  const operator = {
    client: {
      state: 'open',
      session: { sessionId: session },
      get stats() {
        return { queued: 0, unacked: tap.unackedInCurrent, queue: { droppedEvents: 0 } };
      },
    },
  };
  const cluster = {
    name: 'race',
    tap,
    model: { snapshot: () => ({ cluster: CLUSTER, nodes: [], devices: [], deployments: [] }), toJSON: () => ({ deployments: [] }) },
    operator,
    processes: [operator],
    eventsEmitted: 1,
    operationRuns: new Map(),
  } as unknown as SimCluster;
  const target: ConvergeTarget = { uid: 'race', cluster, expectFullPlacement: false };
  return {
    eventId,
    events,
    ack,
    query,
    target,
    during(f: () => void) {
      duringRead = f;
    },
  };
}

describe('the checker against a plane read while the hub commits and acks', () => {
  it('an event committed and acked while the plane is being read is not reported lost', async () => {
    const r = scripted();
    // The hub commits the batch holding seq 2 after the events statement ran, and acks it.
    r.during(() => {
      r.events.add(r.eventId);
      r.ack(2);
    });
    const w = await waitConverged(r.query, r.target, { timeoutMs: 2_000, pollMs: 10 });
    expect(w.ok).toBe(true);
    expect(w.plane.events.has(r.eventId)).toBe(false);
    expect(checkInvariants(w.plane, r.target)).toEqual([]);
    expect(checkInvariants(w.plane, { ...r.target, exactEvents: true })).toEqual([]);
    // The next read holds it to the ack, and finds it.
    const next = await waitConverged(r.query, r.target, { timeoutMs: 2_000, pollMs: 10 });
    expect(next.plane.events.has(r.eventId)).toBe(true);
    expect(checkInvariants(next.plane, r.target)).toEqual([]);
  });

  it('an event acked before the read began and absent from it is still reported lost', async () => {
    const r = scripted();
    r.ack(2);
    const w = await waitConverged(r.query, r.target, { timeoutMs: 2_000, pollMs: 10 });
    expect(w.ok).toBe(true);
    expect(checkInvariants(w.plane, r.target).join('\n')).toMatch(new RegExp(`1 event\\(s\\) acknowledged by the hub are not stored \\(e\\.g\\. ${r.eventId} `));
    expect(checkInvariants(w.plane, { ...r.target, exactEvents: true }).join('\n')).toMatch(/1 event\(s\) sent were not stored/);
    // As does a plane read at rest (no marks: the acks as they are now).
    expect(checkInvariants(await readPlane(r.query, 'race'), r.target).join('\n')).toMatch(/acknowledged by the hub are not stored/);
  });
});
