/**
 * The wire tap's "current session" is the one the latest welcome named, not the one of the link
 * dialled last. A soak (seed 20261206) held a cluster unconverged for 60 s with "41 frames of the
 * current session not acked on the wire" while its operator was open with nothing unacked: in a
 * displacement, two operator processes of the cluster dial one after the other and the hub may
 * welcome them in the other order; the later welcome displaces the earlier session (4409). Read
 * by dialling order, the tap took the displaced session, whose last frames the hub never acked,
 * for the current one until the next fault made a new link.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, newId } from '../../src/protocol';
import type { TransportEvents } from '../../src/operator/transport';
import { linkDetail, linkNotQuiet, type PlaneState } from '../e2e/support/converge';
import type { SimCluster } from '../e2e/support/sim-cluster';
import { WireTap } from '../e2e/support/wire-tap';

const LIMITS = { ping_interval_s: 1, idle_timeout_s: 3, max_frame_bytes: 1 << 20, replay_buffer_frames: 1000, replay_buffer_bytes: 1 << 24 };
const CLUSTER = { kubernetes_version: 'v1.31.2', provider: 'sim', region: 'local', labels: {} };

function link(tap: WireTap) {
  let hub!: TransportEvents;
  const dial = tap.dialer((_req, ev) => {
    hub = ev;
    return { send: () => {}, close: () => {}, bufferedAmount: 0 };
  });
  const transport = dial({ url: 'ws://hub/v1/connect', headers: {} }, { onOpen() {}, onMessage() {}, onClose() {} });
  return {
    welcome(session: string, ack: number, fresh: boolean) {
      hub.onMessage(buildFrame({ type: 'welcome', payload: { session_id: session, ack_seq: ack, full_resync: fresh, hub_version: 'dev', limits: LIMITS }, ack }), false);
    },
    send(seq: number) {
      transport.send(buildFrame({ type: 'cluster.observed', payload: CLUSTER, seq, ack: 0 }));
    },
    ack(n: number) {
      hub.onMessage(buildFrame({ type: 'ack', payload: {}, ack: n }), false);
    },
    close(code: number) {
      hub.onClose(code, '', undefined, undefined, undefined);
    },
  };
}

describe('WireTap.currentSession', () => {
  it('is the session of the latest welcome, whichever link was dialled last', () => {
    const tap = new WireTap();
    const older = `${newId()}.${newId()}`;
    const newer = `${newId()}.${newId()}`;
    // The replica that comes up dials first; the old one, reconnecting, dials after it.
    const replica = link(tap);
    const old = link(tap);
    // The old one's resume is welcomed first and sends frames the hub never acks: the replica's
    // claim, welcomed next, displaces it.
    old.welcome(older, 10, false);
    for (let seq = 11; seq <= 51; seq++) old.send(seq);
    replica.welcome(newer, 0, true);
    old.close(4409);
    replica.send(1);
    replica.ack(1);

    expect(tap.currentSession).toBe(newer);
    expect(tap.unackedInCurrent).toBe(0);
    // And so the checker finds the link quiet (the operator itself open, nothing unacked).
    const operator = { client: { state: 'open', stats: { queued: 0, unacked: 0 }, session: { sessionId: newer } } };
    const cluster = { operator, tap } as unknown as SimCluster;
    expect(linkNotQuiet({ operations: [] } as unknown as PlaneState, cluster)).toEqual([]);
  });

  it("a failure report says where the link stood: the wire's acks, the first unacked frame, the last links", () => {
    const tap = new WireTap();
    const session = `${newId()}.${newId()}`;
    const l = link(tap);
    l.welcome(session, 0, true);
    for (let seq = 1; seq <= 5; seq++) l.send(seq);
    l.ack(2);
    l.close(1006);
    const operator = { client: { state: 'waiting', stats: { queued: 0, unacked: 3 }, session: { sessionId: session, cursor: 0, durableCursor: 0, outbound: null, lossy: false } } };
    const detail = linkDetail({ operator, tap } as unknown as SimCluster).join('\n');
    expect(detail).toContain(`operator waiting: session ${session}`);
    expect(detail).toContain(`wire, session ${session}: acked through 2; 3 sent above it (seq 3..5)`);
    expect(detail).toContain(`first unacked: session ${session}, seq 3`);
    expect(detail).toMatch(/link 1 opened .*"full_resync":true.*close \{"code":1006/);
  });
});
