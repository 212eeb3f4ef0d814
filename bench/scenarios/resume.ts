/**
 * Resume: an operator's connection drops with 1,000 hub frames it has not acknowledged and
 * 1,000 frames of its own the hub never applied; it reconnects with its session id. Time from
 * the reconnect to caught up on both sides (every replayed hub frame received, the hub's ack
 * covering every replayed operator frame, i.e. committed in Postgres). Also the hub→operator side
 * alone, against Socket.IO's connection state recovery replaying the same 1,000 payloads, and
 * plain delivery of 1,000 frames on a live connection.
 */
import { startSocketIoServer, type ChildServer } from '../lib/children';
import type { BenchCluster } from '../lib/env';
import { fmtMs, ratio } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { RawOperator, sleep, withTimeout } from '../lib/operator';
import { device } from '../lib/payloads';
import { sioConnect } from '../lib/sio';
import { repeated } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';
import { buildFrame, newId } from '../../src/protocol';

const TARGET_MS = 200;

interface HubResume {
  welcomeMs: number;
  /** Of the welcome: the WebSocket upgrade (token lookup, routing to the session's object). */
  upgradeMs: number;
  downMs: number;
  upMs: number;
  totalMs: number;
  /** Fresh connect → the hub's snapshot of N deployments received (live delivery). */
  deliverMs: number;
  /** Of live delivery: the upgrade, then the welcome, the snapshot's first deployment and its stream.end (from the start). */
  deliverParts: { upgradeMs: number; welcomeMs: number; firstMs: number };
  replayed: number;
}

/**
 * One repetition against the hub: a fresh session that receives `n` desired deployments (its
 * snapshot) without acking any, a dropped connection, then the resume. `upFrames` frames of the
 * operator's own are replayed on resume (0 = hub→operator side only).
 */
async function hubResumeOnce(ctx: ScenarioContext, n: number, upFrames: number, tag: string): Promise<HubResume> {
  const { env } = ctx;
  const [c] = await env.createClusters(1, tag);
  const cluster = c as BenchCluster;
  await env.seedDesired(cluster.uid, n);

  // First connection: take the snapshot stream, ack nothing (no automatic ack either), then drop.
  const t0 = performance.now();
  const first = await RawOperator.connect(env.wsUrl, cluster.token, { autoAckMs: false });
  const openedAt = performance.now();
  let welcomedAt = Number.NaN;
  let firstAt = Number.NaN;
  const stopTiming = first.onFrame((f, at) => {
    if (f.type === 'welcome') welcomedAt = at;
    else if (f.type === 'deployment.desired' && Number.isNaN(firstAt)) firstAt = at;
  });
  const end = first.next((f) => f.type === 'stream.end', 60_000);
  const welcome = await first.hello({ cluster_id: cluster.name });
  const lastSeq = (await end).seq as number;
  const deliverMs = performance.now() - t0;
  stopTiming();
  const deliverParts = { upgradeMs: openedAt - t0, welcomeMs: welcomedAt - t0, firstMs: firstAt - t0 };
  const sessionId = String(welcome.payload.session_id);
  first.terminate(); // a network drop: no close frame
  await sleep(300);

  // Operator frames that never reached the hub: built now, replayed after the welcome.
  const upTexts: string[] = [];
  for (let i = 0; i < upFrames; i++) {
    upTexts.push(buildFrame({ type: 'device.observed', payload: device(i), seq: i + 1, ack: 0, id: newId() }));
  }

  const r0 = performance.now();
  // Acks by hand once the replay is in, as when the figures before were taken.
  const op = await RawOperator.connect(env.wsUrl, cluster.token, { hint: sessionId, autoAckMs: false });
  const upgradeMs = performance.now() - r0;
  let welcomeAt = 0;
  let downAt: number | null = null;
  let upAt: number | null = upFrames === 0 ? r0 : null;
  let replayed = 0;
  const caughtUp = new Promise<void>((resolve, reject) => {
    op.onFrame((f, at) => {
      if (f.type === 'welcome') {
        welcomeAt = at;
        if (f.payload.full_resync !== false) reject(new Error('resume was refused: full_resync'));
        // Replay our unacknowledged frames at once, as an operator does after the welcome.
        const socket = (op.ws as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
        socket?.cork();
        for (const t of upTexts) op.sendRaw(t);
        socket?.uncork();
        return;
      }
      if (f.seq !== null) {
        replayed++;
        if (f.seq >= lastSeq && downAt === null) {
          downAt = at;
          op.sendAck(); // release the hub's replay buffer
        }
      }
      if (upAt === null && (f.ack ?? 0) >= upFrames) upAt = at;
      if (downAt !== null && upAt !== null) resolve();
    });
    op.onClose((code) => reject(new Error(`closed ${code} during resume`)));
  });
  op.nextSeq = upFrames + 1;
  op.sendFrame('hello', { cluster_id: cluster.name, operator_version: '0.1.0', session_id: sessionId, resume_from: 0, lossy: false }, { ack: null });
  await withTimeout(caughtUp, 60_000, 'resume catch-up');
  op.close();
  const down = (downAt ?? Number.NaN) - r0;
  const up = (upAt ?? Number.NaN) - r0;
  return {
    welcomeMs: welcomeAt - r0,
    upgradeMs,
    downMs: down,
    upMs: up,
    totalMs: Math.max(down, up),
    deliverMs,
    deliverParts,
    replayed,
  };
}

/** Socket.IO: the same payloads missed during a transport drop, replayed by connection state recovery. */
async function sioResumeOnce(server: ChildServer, n: number, room: string): Promise<{ resumeMs: number; deliverMs: number; recovered: boolean }> {
  const url = `http://127.0.0.1:${server.port}`;
  const client = await sioConnect(url, room);
  const payload = {
    deployment_id: 'dep-000001',
    workload_id: 'w-1',
    revision: 1,
    min_replicas: 1,
    max_replicas: 2,
    serving: (await import('../lib/payloads')).SERVING,
    deleted: false,
  };
  const emit = (k: number) =>
    new Promise<void>((resolve) => {
      const reqId = Math.random();
      const onMsg = (m: { type?: string; reqId?: number }) => {
        if (m?.type === 'emitted' && m.reqId === reqId) {
          server.child.off('message', onMsg);
          resolve();
        }
      };
      server.child.on('message', onMsg);
      server.child.send({ type: 'emit', room, n: k, payload, reqId });
    });
  const waitFor = (count: number, timeoutMs = 30_000) =>
    new Promise<number>((resolve) => {
      const deadline = performance.now() + timeoutMs;
      const tick = () => {
        if (client.received.length >= count) resolve(client.received[count - 1]?.at as number);
        else if (performance.now() > deadline) resolve(Number.NaN);
        else setTimeout(tick, 1);
      };
      tick();
    });

  // Live delivery of n frames.
  const d0 = performance.now();
  await emit(n);
  const deliveredAt = await waitFor(n);
  const deliverMs = deliveredAt - d0;

  // Drop the transport (not a client-initiated disconnect, so the server keeps the session).
  const dropped = new Promise<void>((resolve) => client.socket.once('disconnect', () => resolve()));
  (client.socket.io as unknown as { engine: { close(): void } }).engine.close();
  await dropped;
  await sleep(300);
  await emit(n);
  const before = client.received.length;
  const r0 = performance.now();
  const connected = new Promise<void>((resolve) => client.socket.once('connect', () => resolve()));
  client.socket.connect();
  await connected;
  const at = await waitFor(before + n);
  const recovered = client.socket.recovered;
  client.socket.disconnect();
  return { resumeMs: at - r0, deliverMs, recovered };
}

export const resume: Scenario = {
  name: 'resume',
  budgetS: 35,
  title: 'Resume: reconnect → caught up, 1,000 unacked frames each side',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const n = ctx.quick ? 200 : 1_000;
    const reps = ctx.quick ? 1 : Math.max(ctx.reps, 3);
    const sio = await startSocketIoServer(ctx.env.stack.databaseUrl, ctx.env.stack.pgWsProxy);
    try {
      await hubResumeOnce(ctx, 50, 50, 'resume-warm');
      await sioResumeOnce(sio, 50, 'warm');
      takeHubLogCounts();
      const both: HubResume[] = [];
      const down: HubResume[] = [];
      const sioRuns: { resumeMs: number; deliverMs: number; recovered: boolean }[] = [];
      for (let r = 0; r < reps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const b = await hubResumeOnce(ctx, n, n, `resume${r}`);
        const d = await hubResumeOnce(ctx, n, 0, `resumed${r}`);
        const s = await sioResumeOnce(sio, n, `room${r}`);
        both.push(b);
        down.push(d);
        sioRuns.push(s);
        ctx.log(
          `resume rep ${r + 1}: both sides ${fmtMs(b.totalMs)} (welcome ${fmtMs(b.welcomeMs)} of which upgrade ${fmtMs(b.upgradeMs)}, hub→op ${fmtMs(b.downMs)}, op→hub acked ${fmtMs(b.upMs)}); hub→op only ${fmtMs(d.totalMs)} (welcome ${fmtMs(d.welcomeMs)}, upgrade ${fmtMs(d.upgradeMs)}); Socket.IO ${fmtMs(s.resumeMs)} (recovered ${s.recovered})`,
        );
      }
      const hubLog = describeHubLog(takeHubLogCounts());
      const total = repeated(both.map((b) => b.totalMs));
      const downR = repeated(down.map((d) => d.totalMs));
      const sioR = repeated(sioRuns.map((s) => s.resumeMs));
      const deliverHub = repeated(down.map((d) => d.deliverMs));
      const deliverSio = repeated(sioRuns.map((s) => s.deliverMs));
      return {
        name: 'resume',
        title: this.title,
        method: [
          `Per repetition a new cluster with ${n} desired deployments. The operator opens a fresh session, receives the hub's snapshot (resync.begin, ${n} deployment.desired, stream.end: ${n + 2} sequenced frames) and acknowledges none of it; the TCP connection is then dropped (no close frame).`,
          `Both sides: the operator reconnects with \`Wingsmith-Session\` and hello {session_id, resume_from: 0}; on the welcome it replays ${n} device.observed frames the hub never received. Caught up = the hub's last replayed frame received AND the hub's ack covering the operator's ${n} frames (applied in Postgres). Clock starts when the new WebSocket starts opening.`,
          `Hub→operator only: the same without operator frames. Socket.IO: a client in a room misses ${n} broadcasts of the same payload while its transport is down (engine closed, server-side session kept), then \`socket.connect()\`; time until all ${n} are received (\`socket.recovered\` true).`,
          `Live delivery: hub = fresh connect → the snapshot's stream.end (${n} deployments read from Postgres); Socket.IO = ${n} emits to a connected client (IPC request → last received).`,
          `${reps} repetitions.`,
        ],
        figures: [
          {
            metric: `resume, ${n} unacked frames each side → caught up`,
            unit: 'ms',
            hub: total,
            target: `≤ ${TARGET_MS} ms`,
            met: total.median <= TARGET_MS,
          },
          {
            metric: `resume, hub→operator ${n} frames replayed`,
            unit: 'ms',
            hub: downR,
            baselines: [{ label: 'Socket.IO recovery', value: sioR }],
            compare: `${ratio(downR.median / sioR.median)} Socket.IO`,
            target: 'at least as fast as Socket.IO',
            met: downR.median <= sioR.median,
          },
          {
            metric: `live delivery of ${n} frames`,
            unit: 'ms',
            hub: deliverHub,
            baselines: [{ label: 'Socket.IO', value: deliverSio }],
            compare: `${ratio(deliverHub.median / deliverSio.median)} Socket.IO (hub includes connect, claim and reading ${n} rows from Postgres)`,
          },
        ],
        evidence: [
          `Both-sides breakdown (medians): welcome ${fmtMs(repeated(both.map((b) => b.welcomeMs)).median)} (the upgrade ${fmtMs(repeated(both.map((b) => b.upgradeMs)).median)}, then hello → welcome), hub→operator replay complete ${fmtMs(repeated(both.map((b) => b.downMs)).median)}, operator frames acked ${fmtMs(repeated(both.map((b) => b.upMs)).median)}; hub frames replayed per resume: ${both[0]?.replayed ?? 0}.`,
          `Hub→operator only: welcome ${fmtMs(repeated(down.map((d) => d.welcomeMs)).median)}. Socket.IO recovered every time: ${sioRuns.every((s) => s.recovered)}.`,
          `Live delivery, from the start of the fresh connect (medians): upgrade done ${fmtMs(repeated(down.map((d) => d.deliverParts.upgradeMs)).median)}, welcome ${fmtMs(repeated(down.map((d) => d.deliverParts.welcomeMs)).median)}, the snapshot's first deployment ${fmtMs(repeated(down.map((d) => d.deliverParts.firstMs)).median)}, its stream.end ${fmtMs(deliverHub.median)}.`,
          `Hub log: ${hubLog}.`,
        ],
        data: {
          n,
          totalMs: total.median,
          welcomeMs: repeated(both.map((b) => b.welcomeMs)).median,
          downMs: repeated(both.map((b) => b.downMs)).median,
          upMs: repeated(both.map((b) => b.upMs)).median,
          downOnlyMs: downR.median,
          downOnlyWelcomeMs: repeated(down.map((d) => d.welcomeMs)).median,
          upgradeMs: repeated([...both, ...down].map((b) => b.upgradeMs)).median,
          sioMs: sioR.median,
          deliverHubMs: deliverHub.median,
          deliverUpgradeMs: repeated(down.map((d) => d.deliverParts.upgradeMs)).median,
          deliverWelcomeMs: repeated(down.map((d) => d.deliverParts.welcomeMs)).median,
          deliverFirstMs: repeated(down.map((d) => d.deliverParts.firstMs)).median,
          deliverSioMs: deliverSio.median,
        },
      };
    } finally {
      await sio.stop();
    }
  },
};
