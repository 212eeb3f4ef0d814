/**
 * Ingest: observed frames (device.observed, distinct GPUs) through one session as fast as a
 * window of unacknowledged frames allows, acks after commit; the ack latency distribution; a
 * paced run for latency at moderate load; then 50 sessions at once.
 * Baselines: the bare ws echo server (ceiling: parse + ack per frame) under the same sender, and
 * Postgres itself writing the same rows (see baselines/postgres.ts).
 */
import {
  captureHubStatement,
  claimedFence,
  deviceBatch,
  fillfactorExperiment,
  MINIMAL_UPSERT,
  planningMs,
  minimalParams,
  timeViaDriver,
  timeViaPsql,
} from '../baselines/postgres';
import { startEchoServer, startWorkerdFloor } from '../lib/children';
import type { BenchCluster } from '../lib/env';
import { fmtMs, fmtNum, pct } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { runLoad, type LoadOptions, type LoadResult } from '../lib/load';
import { RawOperator } from '../lib/operator';
import { postgresCpuSeconds, readCpuSeconds } from '../lib/proc';
import { median, repeated, summarize } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

/** Issue 13's targets: one session, and the share of the ceiling for many sessions. */
const TARGET_FPS = 60_000;
const TARGET_FRACTION = 0.65;
const TARGET_MULTI_FRACTION = 0.55;
const SUBJECTS = 10_000;

/** Open a hub session and read its (empty) resync stream; acks it. */
export async function openHubSession(wsUrl: string, c: BenchCluster): Promise<RawOperator> {
  const op = await RawOperator.connect(wsUrl, c.token);
  const end = op.next((f) => f.type === 'stream.end');
  await op.hello({ cluster_id: c.name });
  await end;
  op.sendAck();
  return op;
}

/** Open a connection to the echo server (or the runtime floor) and say hello. */
export async function openEcho(url: string): Promise<RawOperator> {
  const op = await RawOperator.connect(url, 'x');
  await op.hello({ cluster_id: 'echo' });
  return op;
}

interface Costs {
  workerdCpu: number;
  devProxyCpu: number;
  postgresCpu: number;
  proxyCpu: number;
  wall: number;
}

async function withCosts<T>(workerdPid: number, proxyPid: number, fn: () => Promise<T>, devProxyPid = 0): Promise<[T, Costs]> {
  const d0 = devProxyPid ? readCpuSeconds(devProxyPid) : 0;
  const w0 = readCpuSeconds(workerdPid);
  const p0 = postgresCpuSeconds();
  const x0 = readCpuSeconds(proxyPid);
  const t0 = performance.now();
  const r = await fn();
  return [
    r,
    {
      workerdCpu: readCpuSeconds(workerdPid) - w0,
      devProxyCpu: devProxyPid ? readCpuSeconds(devProxyPid) - d0 : 0,
      postgresCpu: postgresCpuSeconds() - p0,
      proxyCpu: readCpuSeconds(proxyPid) - x0,
      wall: (performance.now() - t0) / 1000,
    },
  ];
}

/** Several sessions loaded at once; aggregate frames/s and pooled latencies. */
async function multiLoad(ops: RawOperator[], o: LoadOptions): Promise<{ perSecond: number; latencies: number[] }> {
  const rs = await Promise.all(ops.map((op, i) => runLoad(op, { ...o, subjectOffset: i * o.subjects })));
  const latencies: number[] = [];
  for (const r of rs) for (const l of r.latencies) latencies.push(l);
  return { perSecond: rs.reduce((a, r) => a + r.perSecond, 0), latencies };
}

export const ingest: Scenario = {
  name: 'ingest',
  budgetS: 105,
  title: 'Ingest: observed frames through a session, acked after commit',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const { env } = ctx;
    const measureMs = ctx.quick ? 2_000 : 5_000;
    const warmupMs = ctx.quick ? 1_000 : 1_500;
    const window = 10_000;
    const sessions = ctx.quick ? 10 : 50;
    const evidence: string[] = [];
    const echo = await startEchoServer();
    const echoUrl = `ws://127.0.0.1:${echo.port}`;
    // The runtime's floor: what workerd charges per frame before the hub's own work.
    const floor = await startWorkerdFloor();
    try {
      const [cluster] = await env.createClusters(1, 'ingest');
      const hubOp = await openHubSession(env.wsUrl, cluster as BenchCluster);
      const echoOp = await openEcho(echoUrl);
      const floorOp = await openEcho(`ws://127.0.0.1:${floor.port}`);
      // Insert the GPUs once, unmeasured: the measured runs re-report existing GPUs (steady state).
      // Each once, acked, then 1.5 s more of the same unmeasured.
      await runLoad(hubOp, { window, warmupMs: 0, measureMs: 0, subjects: SUBJECTS, total: SUBJECTS });
      await runLoad(hubOp, { window, warmupMs: 0, measureMs: 1_500, subjects: SUBJECTS });
      takeHubLogCounts();

      const hubRuns: LoadResult[] = [];
      const echoRuns: LoadResult[] = [];
      const hubCosts: Costs[] = [];
      const echoCosts: Costs[] = [];
      const floorRuns: LoadResult[] = [];
      const floorCosts: Costs[] = [];
      const loadOpts: LoadOptions = { window, warmupMs, measureMs, subjects: SUBJECTS };
      for (let r = 0; r < ctx.reps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const [h, hc] = await withCosts(env.workerdPid, env.stack.pid, () => runLoad(hubOp, loadOpts), env.proxyWorkerdPid);
        const [e, ec] = await withCosts(echo.pid, env.stack.pid, () => runLoad(echoOp, loadOpts));
        const [w, wc] = await withCosts(floor.pid, env.stack.pid, () => runLoad(floorOp, loadOpts));
        floorRuns.push(w);
        floorCosts.push(wc);
        hubRuns.push(h);
        echoRuns.push(e);
        hubCosts.push(hc);
        echoCosts.push(ec);
        const hs = summarize(h.latencies);
        ctx.log(
          `ingest rep ${r + 1}: hub ${fmtNum(h.perSecond)} frames/s (ack p50 ${fmtMs(hs.p50)}, p99 ${fmtMs(hs.p99)}, median batch ${fmtNum(median(h.ackSteps))}); echo ${fmtNum(e.perSecond)} frames/s; runtime floor ${fmtNum(w.perSecond)} frames/s`,
        );
      }
      const hubLog = describeHubLog(takeHubLogCounts());

      // Paced: latency at a moderate load (a quarter of the target rate).
      const paceRate = 5_000;
      const paced = await runLoad(hubOp, { window, warmupMs: 1_000, measureMs: ctx.quick ? 1_500 : 3_000, subjects: SUBJECTS, rate: paceRate });
      const pacedEcho = await runLoad(echoOp, { window, warmupMs: 1_000, measureMs: ctx.quick ? 1_500 : 3_000, subjects: SUBJECTS, rate: paceRate });
      hubOp.close();
      echoOp.close();
      floorOp.close();

      // 50 sessions at once.
      const clusters = await env.createClusters(sessions, 'ingest-multi');
      const hubOps = await Promise.all(clusters.map((c) => openHubSession(env.wsUrl, c)));
      const echoOps = await Promise.all(clusters.map(() => openEcho(echoUrl)));
      const perSession: LoadOptions = { window: Math.max(500, Math.floor(window / sessions) * 4), warmupMs, measureMs, subjects: 2_000 };
      // Insert every session's GPUs, unmeasured, so the measured runs re-report existing rows too.
      await multiLoad(hubOps, { ...perSession, warmupMs: 0, measureMs: 0, total: perSession.subjects });
      await multiLoad(hubOps, { ...perSession, warmupMs: 0, measureMs: 1_000 });
      const multiHub: number[] = [];
      const multiEcho: number[] = [];
      const multiLat: number[] = [];
      let multiCosts: Costs | null = null;
      const multiReps = ctx.quick ? 1 : Math.min(ctx.reps, 2);
      for (let r = 0; r < multiReps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const [m, mc] = await withCosts(env.workerdPid, env.stack.pid, () => multiLoad(hubOps, perSession), env.proxyWorkerdPid);
        multiCosts = mc;
        const e = await multiLoad(echoOps, perSession);
        multiHub.push(m.perSecond);
        multiEcho.push(e.perSecond);
        multiLat.push(summarize(m.latencies).p99);
        ctx.log(`ingest ${sessions} sessions rep ${r + 1}: hub ${fmtNum(m.perSecond)} frames/s total (ack p99 ${fmtMs(summarize(m.latencies).p99)}); echo ${fmtNum(e.perSecond)} frames/s`);
      }
      for (const op of [...hubOps, ...echoOps]) op.close();

      // Postgres baseline: the same rows, batch sizes as the hub formed them.
      const batchMedian = Math.max(1, Math.round(median(hubRuns.flatMap((h) => h.ackSteps))));
      const client = await env.newClient();
      let pgFigures: {
        hubStmt: number[];
        hubNamed: number[];
        minimal: number[];
        hubPsql: number[] | null;
        minimalPsql: number[] | null;
        batch: number;
        hubPlan: number[] | null;
        minimalPlan: number[] | null;
        ff: { ff100: number[]; ff70: number[] } | null;
      };
      try {
        const fence = await claimedFence(env, client);
        const batch = deviceBatch(batchMedian, 0, 1);
        const hubStmt = await captureHubStatement(fence, batch);
        const minimal = minimalParams(fence, batch);
        const n = ctx.quick ? 5 : 15;
        await timeViaDriver(client, hubStmt.text, hubStmt.params, 2); // insert the rows, warm the plan
        pgFigures = {
          batch: batchMedian,
          hubStmt: await timeViaDriver(client, hubStmt.text, hubStmt.params, n),
          // Postgres plans a prepared statement with its parameters the first 5 times, then may
          // switch to a generic plan: time it after that, as a long-lived connection would run it.
          hubNamed: await timeViaDriver(client, hubStmt.text, hubStmt.params, n + 6, 'bench_ingest').then((t) => t.slice(6)),
          minimal: await timeViaDriver(client, MINIMAL_UPSERT, minimal, n),
          hubPsql: await timeViaPsql(env.stack.databaseUrl, hubStmt.text, hubStmt.params, n),
          minimalPsql: await timeViaPsql(env.stack.databaseUrl, MINIMAL_UPSERT, minimal, n),
          hubPlan: await planningMs(env.stack.databaseUrl, hubStmt.text, hubStmt.params, ctx.quick ? 3 : 5),
          minimalPlan: await planningMs(env.stack.databaseUrl, MINIMAL_UPSERT, minimal, ctx.quick ? 3 : 5),
          ff: await fillfactorExperiment(env.stack.databaseUrl, minimal, ctx.quick ? 4 : 8),
        };
      } finally {
        await client.end().catch(() => undefined);
      }

      const hubFps = repeated(hubRuns.map((h) => h.perSecond));
      const echoFps = repeated(echoRuns.map((e) => e.perSecond));
      const floorFps = repeated(floorRuns.map((e) => e.perSecond));
      const fraction = hubFps.median / echoFps.median;
      const hubP50 = repeated(hubRuns.map((h) => summarize(h.latencies).p50));
      const hubP99 = repeated(hubRuns.map((h) => summarize(h.latencies).p99));
      const echoP50 = repeated(echoRuns.map((h) => summarize(h.latencies).p50));
      const echoP99 = repeated(echoRuns.map((h) => summarize(h.latencies).p99));
      const steps = hubRuns.flatMap((h) => h.ackSteps);
      const stepS = summarize(steps);
      const stmtMed = median(pgFigures.hubStmt);
      const minMed = median(pgFigures.minimal);
      const batchesPerS = hubFps.median / Math.max(1, stepS.mean);
      const dbShare = (batchesPerS * stmtMed) / 1000;
      const cost = (c: Costs[], pick: (c: Costs) => number, frames: number[]) =>
        median(c.map((x, i) => (pick(x) * 1e6) / Math.max(1, (frames[i] as number) * (x.wall))));
      const hubFrames = hubRuns.map((h) => h.perSecond);
      const echoFrames = echoRuns.map((e) => e.perSecond);
      const floorFrames = floorRuns.map((e) => e.perSecond);
      const floorUs = cost(floorCosts, (c) => c.workerdCpu, floorFrames);
      const pacedS = summarize(paced.latencies);
      const pacedE = summarize(pacedEcho.latencies);

      evidence.push(
        `Hub batches (frames per ack advance, all repetitions): median ${fmtNum(stepS.p50)}, mean ${fmtNum(stepS.mean)}, p90 ${fmtNum(stepS.p90)}, max ${fmtNum(stepS.max)}; ≈ ${fmtNum(batchesPerS)} batches/s, one Postgres statement each.`,
        `CPU per frame (µs, median of repetitions): workerd running the hub ${fmtNum(cost(hubCosts, (c) => c.workerdCpu, hubFrames))}, wrangler's dev proxy worker (local only) ${fmtNum(cost(hubCosts, (c) => c.devProxyCpu, hubFrames))}, Postgres (all backends) ${fmtNum(cost(hubCosts, (c) => c.postgresCpu, hubFrames))}, pg proxy ${fmtNum(cost(hubCosts, (c) => c.proxyCpu, hubFrames))}, load generator ${fmtNum(median(hubRuns.map((h) => (h.clientCpuSeconds * 1e6) / Math.max(1, h.frames))))}; echo server ${fmtNum(cost(echoCosts, (c) => c.workerdCpu, echoFrames))} (load generator ${fmtNum(median(echoRuns.map((h) => (h.clientCpuSeconds * 1e6) / Math.max(1, h.frames))))}); workerd running the runtime floor ${fmtNum(floorUs)} (load generator ${fmtNum(median(floorRuns.map((h) => (h.clientCpuSeconds * 1e6) / Math.max(1, h.frames))))}).`,
        `Utilisation during hub runs (cores): workerd ${fmtNum(median(hubCosts.map((c) => c.workerdCpu / c.wall)))}, dev proxy worker ${fmtNum(median(hubCosts.map((c) => c.devProxyCpu / c.wall)))}, Postgres ${fmtNum(median(hubCosts.map((c) => c.postgresCpu / c.wall)))}, proxy ${fmtNum(median(hubCosts.map((c) => c.proxyCpu / c.wall)))} — of ${2} cores.`,
        `Postgres baseline, batch of ${pgFigures.batch} device rows (the hub's median batch): hub's fenced statement ${fmtMs(stmtMed)} via Neon driver + proxy${pgFigures.hubPsql ? `, ${fmtMs(median(pgFigures.hubPsql))} straight (psql, TCP)` : ''}; minimal set-based upsert ${fmtMs(minMed)} via driver + proxy${pgFigures.minimalPsql ? `, ${fmtMs(median(pgFigures.minimalPsql))} straight` : ''}. Database-only ceiling at that batch size: ${fmtNum((pgFigures.batch / stmtMed) * 1000)} frames/s (hub statement), ${fmtNum((pgFigures.batch / minMed) * 1000)} frames/s (minimal).`,
        `Planning, paid on every batch (the driver sends unnamed statements, so Postgres plans each one with its parameters): hub statement ${pgFigures.hubPlan ? fmtMs(median(pgFigures.hubPlan)) : 'n/a'}, minimal upsert ${pgFigures.minimalPlan ? fmtMs(median(pgFigures.minimalPlan)) : 'n/a'} (EXPLAIN SUMMARY, custom plans; part of the statement times above).`,
        ...(pgFigures.ff
          ? [
              `HOT experiment (same ${pgFigures.batch} rows re-reported, fresh copies of the devices table, psql): fillfactor 100 (Postgres's default) ${fmtMs(median(pgFigures.ff.ff100))} per upsert, fillfactor 70 (as migrated, 0007) ${fmtMs(median(pgFigures.ff.ff70))}.`,
            ]
          : []),
        `Share of hub ingest wall time spent waiting on the batch statement: ≈ ${pct(dbShare)} (batches/s × statement time); the rest is the session object's per-frame work and the hop to it.`,
        `Paced at ${fmtNum(paceRate)} frames/s: hub ack latency p50 ${fmtMs(pacedS.p50)}, p90 ${fmtMs(pacedS.p90)}, p99 ${fmtMs(pacedS.p99)} (achieved ${fmtNum(paced.perSecond)} frames/s); echo p50 ${fmtMs(pacedE.p50)}, p99 ${fmtMs(pacedE.p99)}.`,
        `${sessions} sessions: CPU during the run — workerd ${multiCosts ? fmtNum(multiCosts.workerdCpu / multiCosts.wall) : 'n/a'} cores, Postgres ${multiCosts ? fmtNum(multiCosts.postgresCpu / multiCosts.wall) : 'n/a'} cores; ack p99 ${fmtMs(median(multiLat))}.`,
        `Hub log during the timed runs: ${hubLog}.`,
      );

      const multiR = repeated(multiHub);
      const multiE = repeated(multiEcho);
      return {
        name: 'ingest',
        title: this.title,
        method: [
          `One session, one raw ws client (no compression), device.observed frames cycling over ${fmtNum(SUBJECTS)} distinct GPUs (rows exist: an unmeasured pass reports each GPU once and waits for its ack, then 1.5 s more unmeasured). The client keeps at most ${fmtNum(window)} frames unacknowledged; throughput = frames whose ack arrived inside a ${measureMs / 1000} s window after ${warmupMs / 1000} s of warm-up. Ack latency = frame sent → the first ack covering it. ${ctx.reps} repetitions, hub, echo and runtime floor in turn.`,
          `Hub acks mean committed in Postgres (one fenced set-based statement per batch); the echo server acks every frame after JSON.parse, stores nothing. The runtime's floor: a Durable Object of local workerd that takes its socket as the hub's session object does (\`ctx.acceptWebSocket\`, so each message is an event of its own), parses every frame and acks every 500th (bench/baselines/workerd-floor.ts): what the hub's runtime charges per frame before any of the hub's own work.`,
          `Then ${sessions} sessions (distinct clusters) at once, each with a window of ${perSession.window}, ${fmtNum(perSession.subjects)} GPUs each (rows exist: each session reports each of its GPUs once and waits for the acks, then 1 s more unmeasured); the echo server gets ${sessions} connections under the same sender.`,
        ],
        figures: [
          {
            metric: 'one session, sustained frames/s (acked after commit)',
            unit: 'frames/s',
            hub: hubFps,
            baselines: [
              { label: 'ws echo ceiling', value: echoFps },
              { label: 'runtime floor: a hibernatable Durable Object that parses each frame, acks every 500th', value: floorFps },
            ],
            compare: `hub = ${pct(fraction)} of ceiling`,
            target: `≥ ${fmtNum(TARGET_FPS)} frames/s and ≥ ${pct(TARGET_FRACTION)} of ceiling`,
            met: hubFps.median >= TARGET_FPS && fraction >= TARGET_FRACTION,
          },
          { metric: 'ack latency p50 at saturation', unit: 'ms', hub: hubP50, baselines: [{ label: 'ws echo', value: echoP50 }] },
          { metric: 'ack latency p99 at saturation', unit: 'ms', hub: hubP99, baselines: [{ label: 'ws echo', value: echoP99 }] },
          {
            metric: `${sessions} sessions at once, total frames/s`,
            unit: 'frames/s',
            hub: multiR,
            baselines: [{ label: 'ws echo ceiling', value: multiE }],
            compare: `hub = ${pct(multiR.median / multiE.median)} of ceiling`,
            target: `≥ ${pct(TARGET_MULTI_FRACTION)} of ceiling`,
            met: multiR.median / multiE.median >= TARGET_MULTI_FRACTION,
          },
          {
            metric: `Postgres alone: batch of ${pgFigures.batch} rows, hub statement as sent (unnamed)`,
            unit: 'ms',
            hub: repeated(pgFigures.hubStmt),
            baselines: [
              { label: 'hub statement prepared once (named), driver+proxy', value: repeated(pgFigures.hubNamed) },
              { label: 'minimal upsert, driver+proxy', value: repeated(pgFigures.minimal) },
              ...(pgFigures.hubPsql ? [{ label: 'hub statement, psql straight', value: repeated(pgFigures.hubPsql) }] : []),
              ...(pgFigures.minimalPsql ? [{ label: 'minimal upsert, psql straight', value: repeated(pgFigures.minimalPsql) }] : []),
            ],
            compare: `DB ceiling ${fmtNum((pgFigures.batch / stmtMed) * 1000)} frames/s; DB ≈ ${pct(dbShare)} of hub ingest time`,
          },
        ],
        evidence,
        data: {
          hubFps: hubFps.median,
          echoFps: echoFps.median,
          fraction,
          floorFps: floorFps.median,
          floorUsPerFrame: floorUs,
          echoUsPerFrame: cost(echoCosts, (c) => c.workerdCpu, echoFrames),
          batchMedian: stepS.p50,
          batchesPerS,
          stmtMs: stmtMed,
          namedMs: median(pgFigures.hubNamed),
          minimalMs: minMed,
          hubPsqlMs: pgFigures.hubPsql ? median(pgFigures.hubPsql) : Number.NaN,
          minimalPsqlMs: pgFigures.minimalPsql ? median(pgFigures.minimalPsql) : Number.NaN,
          hubPlanMs: pgFigures.hubPlan ? median(pgFigures.hubPlan) : Number.NaN,
          minimalPlanMs: pgFigures.minimalPlan ? median(pgFigures.minimalPlan) : Number.NaN,
          ff100Ms: pgFigures.ff ? median(pgFigures.ff.ff100) : Number.NaN,
          ff70Ms: pgFigures.ff ? median(pgFigures.ff.ff70) : Number.NaN,
          dbShare,
          workerdUsPerFrame: cost(hubCosts, (c) => c.workerdCpu, hubFrames),
          postgresUsPerFrame: cost(hubCosts, (c) => c.postgresCpu, hubFrames),
          workerdCores: median(hubCosts.map((c) => c.workerdCpu / c.wall)),
          postgresCores: median(hubCosts.map((c) => c.postgresCpu / c.wall)),
          multiFps: multiR.median,
          multiEchoFps: multiE.median,
          multiWorkerdCores: multiCosts ? multiCosts.workerdCpu / multiCosts.wall : Number.NaN,
          multiPostgresCores: multiCosts ? multiCosts.postgresCpu / multiCosts.wall : Number.NaN,
          multiP99: median(multiLat),
          sessions,
          pacedP50: pacedS.p50,
          pacedP99: pacedS.p99,
          hubP50: hubP50.median,
          hubP99: hubP99.median,
        },
      };
    } finally {
      await echo.stop();
      await floor.stop();
    }
  },
};
