/**
 * README "Logs": every close the hub initiates has one line with `cluster`, `session`,
 * `connection`, `close` and `reason`, at warn for 4429 (send queue or replay window). The 4429
 * closes wrote a line of their own instead (`hub send queue full; closing`, `operator has not
 * released the replay window; …`) naming neither the close code nor the connection, so a search
 * of the logs for a cluster's 4429 closes found none of them. A hub with tiny limits, as in
 * backpressure.test.ts, so both closes come quickly; real workerd and Postgres.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode, newId } from '../../src/protocol';
import { FAST_TIMERS, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();

const LIMITS = {
  ...FAST_TIMERS,
  REPLAY_BUFFER_FRAMES: '4',
  REPLAY_BUFFER_BYTES: '6000',
  SEND_QUEUE_FRAMES: '6',
  MAX_FRAME_BYTES: '8192',
};
const h = useHub(LIMITS);

/** The one line of a hub-initiated 4429 close of this cluster's session, as the README describes it. */
async function closeLine(cluster: string, session: string) {
  // The line is written as the close is sent; give the relay from workerd a moment.
  await sleep(500);
  const mine = lines.filter((l) => l.cluster === cluster);
  const line = mine.find((l) => l.close === CloseCode.SEND_QUEUE_FULL);
  expect(line, `a line with close: 4429 among ${JSON.stringify(mine)}`).toBeDefined();
  expect(line).toMatchObject({ level: 'warn', session, connection: expect.any(String), reason: expect.any(String) });
}

describe('a 4429 close has the line every hub-initiated close has', () => {
  it('a send queue overflowing (unknown types answered and never acknowledged) closes 4429 with a warn line naming the cluster, session, connection, close and reason', async () => {
    const c = await h.newCluster('rv-4429-queue');
    const { peer, sessionId } = await h.openFresh(c);
    const unknown = (seq: number) => JSON.stringify({ v: 1, type: 'future.thing', id: newId(), seq, ack: 0, reply_to: null, ts: new Date().toISOString(), payload: {} });
    const n = Number(LIMITS.SEND_QUEUE_FRAMES) + Number(LIMITS.REPLAY_BUFFER_FRAMES) + 2;
    for (let i = 1; i <= n; i++) peer.sendRaw(unknown(i));
    // Answered once their batches commit: a frame after that (if the burst itself was not cut) is refused.
    await Promise.race([peer.closed, peer.ackedThrough(n).catch(() => undefined)]);
    if (!peer.isClosed) peer.sendRaw(unknown(n + 1));
    expect((await peer.closedWith()).code).toBe(CloseCode.SEND_QUEUE_FULL);
    await closeLine(c.uid, sessionId);
  });

  it('an operator that never releases its replay window is closed 4429 with a warn line naming the cluster, session, connection, close and reason', async () => {
    const c = await h.newCluster('rv-4429-window');
    for (let i = 0; i < 8; i++) {
      const body = { workload_id: 'w', min_replicas: 1, max_replicas: 1, serving: { engine: 'vllm', model: 'm', image: 'img', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 } };
      expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d${i}`, body)).status).toBe(200);
    }
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    // Alive (pings) but never acknowledging: the window stays full until the hub gives up.
    const pinger = setInterval(() => peer.send('ping', {}, { ack: 0 }), 500);
    try {
      expect((await peer.closedWith(15_000)).code).toBe(CloseCode.SEND_QUEUE_FULL);
    } finally {
      clearInterval(pinger);
    }
    await closeLine(c.uid, w.payload.session_id as string);
  });
});
