/**
 * Handshake: WebSocket connect → welcome, which includes the Worker's token lookup in Postgres,
 * the Durable Object's registration check and ownership claim (one statement), and the welcome.
 * Sequential connects for the latency distribution; then a storm of operators connecting at once.
 * Baselines: the bare `ws` echo server (connect + hello→welcome round trip) and Socket.IO's connect.
 */
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { io as ioClient } from 'socket.io-client';
import { Backoff, DEFAULT_BACKOFF } from '../../src/operator/backoff';
import { startEchoServer, startSocketIoServer } from '../lib/children';
import type { BenchCluster } from '../lib/env';
import { fmtMs, fmtNum, ratio } from '../lib/format';
import { ConnectError, RawOperator, sleep } from '../lib/operator';
import { PgActivitySampler } from '../lib/pgstat';
import { pgbenchConnect } from '../baselines/postgres';
import { postgresCpuSeconds, ProcSampler } from '../lib/proc';
import { median, repeated, summarize } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

/** Issue 13's targets. */
const HANDSHAKE_TARGET_MS = 10;
const STORM_TARGET_S = 6;
/** A storm still short of all welcomed after this long is reported as not finished. */
const STORM_DEADLINE_MS = 30_000;

/** One fresh hub session: ms from starting the WebSocket to the welcome. Closes after the hub's initial resync stream. */
async function hubConnectOnce(wsUrl: string, c: BenchCluster, split?: number[], resyncMs?: number[]): Promise<number> {
  const t0 = performance.now();
  const op = await RawOperator.connect(wsUrl, c.token);
  split?.push(performance.now() - t0);
  const end = op.next((f) => f.type === 'stream.end');
  await op.hello({ cluster_id: c.name });
  const ms = performance.now() - t0;
  // Let the session finish its (empty) resync stream before the next connect, then close cleanly.
  if (await end.then(() => true, () => false)) resyncMs?.push(performance.now() - t0 - ms);
  op.close();
  return ms;
}

async function echoConnectOnce(wsUrl: string): Promise<number> {
  const t0 = performance.now();
  const op = await RawOperator.connect(wsUrl, 'x');
  await op.hello({ cluster_id: 'echo' });
  const ms = performance.now() - t0;
  op.close();
  return ms;
}

async function socketIoConnectOnce(url: string, room: string): Promise<number> {
  const t0 = performance.now();
  const s = ioClient(url, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { cluster: room } });
  await new Promise<void>((resolve, reject) => {
    s.once('connect', () => resolve());
    s.once('connect_error', reject);
  });
  const ms = performance.now() - t0;
  s.disconnect();
  return ms;
}

export interface StormOutcome {
  /** Seconds from the start until the last operator was welcomed (NaN when not all were). */
  seconds: number;
  welcomed: number;
  attempts: number;
  failures: Record<string, number>;
  ops: RawOperator[];
}

/**
 * `n` operators connect at once; each one that is refused or fails retries with the SDK's
 * reconnect policy (full-jitter exponential backoff, base 1 s) until welcomed or `deadlineMs`.
 */
export async function storm(n: number, attempt: (i: number) => Promise<RawOperator>, deadlineMs: number): Promise<StormOutcome> {
  const t0 = performance.now();
  const failures: Record<string, number> = {};
  let attempts = 0;
  let last = 0;
  let over = false;
  const ops: RawOperator[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  // At the deadline the storm is over: attempts still in flight and backoff sleeps are abandoned
  // (a late welcome is closed at once), so the scenario's time stays bounded.
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => {
      over = true;
      resolve('deadline');
    }, deadlineMs);
  });
  const one = async (i: number) => {
    const backoff = new Backoff(DEFAULT_BACKOFF);
    while (!over) {
      attempts++;
      const pending = attempt(i);
      try {
        const r = await Promise.race([pending, deadline]);
        if (r === 'deadline') {
          pending.then((op) => op.terminate()).catch(() => undefined);
          return;
        }
        ops.push(r);
        last = performance.now() - t0;
        return;
      } catch (err) {
        const key = err instanceof ConnectError ? (err.status ? `HTTP ${err.status}` : 'connect error') : (err as Error).message.slice(0, 80);
        failures[key] = (failures[key] ?? 0) + 1;
        await Promise.race([sleep(backoff.next()), deadline]);
      }
    }
  };
  await Promise.all(Array.from({ length: n }, (_, i) => one(i)));
  clearTimeout(timer);
  return { seconds: ops.length === n ? last / 1000 : Number.NaN, welcomed: ops.length, attempts, failures, ops };
}

/** Connect + hello; on refusal the socket is dropped and the error says why. */
export async function hubAttempt(wsUrl: string, c: BenchCluster, hint?: string | null): Promise<RawOperator> {
  const op = await RawOperator.connect(wsUrl, c.token, hint ? { hint } : {});
  try {
    await op.hello({ cluster_id: c.name });
    return op;
  } catch (err) {
    op.terminate();
    const code = op.closed ? `close ${op.closed.code}` : '';
    throw new Error(`${code} ${(err as Error).message}`.trim());
  }
}

export const handshake: Scenario = {
  name: 'handshake',
  budgetS: 150,
  title: 'Handshake: connect → welcome, and a connect storm',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const { env } = ctx;
    const perRep = ctx.quick ? 60 : Math.max(100, Math.ceil(510 / ctx.reps));
    const stormSize = ctx.quick ? 100 : 1_000;
    const stormReps = ctx.quick ? 1 : Math.min(ctx.reps, 2);
    const evidence: string[] = [];

    const pool = await env.createClusters(perRep * ctx.reps + 20, 'hs');
    const echo = await startEchoServer();
    const sio = await startSocketIoServer(env.stack.databaseUrl, env.stack.pgWsProxy);
    try {
      const echoUrl = `ws://127.0.0.1:${echo.port}`;
      const sioUrl = `http://127.0.0.1:${sio.port}`;
      // Warm-up (JIT, module load, first DO class instantiation): not measured.
      for (let i = 0; i < 20; i++) {
        await hubConnectOnce(env.wsUrl, pool[pool.length - 1 - i] as BenchCluster);
        await echoConnectOnce(echoUrl);
        await socketIoConnectOnce(sioUrl, 'warm');
      }

      const hubMed: number[] = [];
      const hubP99: number[] = [];
      const echoMed: number[] = [];
      const echoP99: number[] = [];
      const sioMed: number[] = [];
      const sioP99: number[] = [];
      const all: number[] = [];
      const upgradeMs: number[] = [];
      /** Welcome → the end of the hub's (empty) resync stream. */
      const resyncMs: number[] = [];
      const cpu = new ProcSampler(env.workerdPid, 250);
      let cpuPerConnectMs = 0;
      let kernelPerConnectMs = 0;
      for (let r = 0; r < ctx.reps; r++) {
        const hub: number[] = [];
        cpu.start();
        for (let i = 0; i < perRep; i++) hub.push(await hubConnectOnce(env.wsUrl, pool[r * perRep + i] as BenchCluster, upgradeMs, resyncMs));
        const seqUsed = cpu.stop();
        cpuPerConnectMs += (seqUsed.cpuSeconds * 1000) / perRep / ctx.reps;
        kernelPerConnectMs += (seqUsed.systemSeconds * 1000) / perRep / ctx.reps;
        const echoT: number[] = [];
        for (let i = 0; i < perRep; i++) echoT.push(await echoConnectOnce(echoUrl));
        const sioT: number[] = [];
        for (let i = 0; i < perRep; i++) sioT.push(await socketIoConnectOnce(sioUrl, `r${i}`));
        const h = summarize(hub);
        const e = summarize(echoT);
        const s = summarize(sioT);
        all.push(...hub);
        hubMed.push(h.p50);
        hubP99.push(h.p99);
        echoMed.push(e.p50);
        echoP99.push(e.p99);
        sioMed.push(s.p50);
        sioP99.push(s.p99);
        ctx.log(`handshake rep ${r + 1}: hub median ${fmtMs(h.p50)} p99 ${fmtMs(h.p99)}; echo ${fmtMs(e.p50)}; socket.io ${fmtMs(s.p50)}`);
      }
      const pooled = summarize(all);
      const upgrade = summarize(upgradeMs);

      // Postgres: what a fresh connection costs (the hub opens one in the Worker and one in the new session object).
      const connN = ctx.quick ? 20 : 60;
      const connMs: number[] = [];
      const queryMs: number[] = [];
      const pgCpu0 = postgresCpuSeconds();
      for (let i = 0; i < connN; i++) {
        const t0 = performance.now();
        const client = await env.newClient();
        await client.query('select 1');
        connMs.push(performance.now() - t0);
        const q0 = performance.now();
        await client.query('select 1');
        queryMs.push(performance.now() - q0);
        await client.end();
      }
      const pgCpuPerConnMs = ((postgresCpuSeconds() - pgCpu0) * 1000) / connN;
      const pgbench = await pgbenchConnect(env.stack.databaseUrl, ctx.quick ? 2 : 4);
      const conn = summarize(connMs);
      evidence.push(
        `Where the hub's handshake time goes (medians): WebSocket upgrade ${fmtMs(upgrade.p50)} (the Worker hashes the token, looks it up through a gateway object's warm connection, routes to a new session object), then hello → welcome ${fmtMs(pooled.p50 - upgrade.p50)} (the object claims ownership in one statement, again through the gateway).`,
        `A new Postgres connection + first query through the Neon driver and proxy, from Node: median ${fmtMs(conn.p50)} (p90 ${fmtMs(conn.p90)}); the same query on the open connection ${fmtMs(median(queryMs))}. Postgres CPU per new connection ≈ ${fmtNum(pgCpuPerConnMs)} ms (all postgres processes, measured around ${connN} connects)${pgbench ? `; pgbench -C straight to Postgres (no proxy, no driver): average connection time ${fmtMs(pgbench.connectMs)}` : ''}.`,
        `The hub's resync of a fresh session (resync.begin → stream.end, the clusters have no desired deployments) ends ${fmtMs(median(resyncMs))} after its welcome (median)${resyncMs.length < pooled.n ? `; ${pooled.n - resyncMs.length} streams never ended` : ''}.`,
        `Hub, all ${pooled.n} connects pooled: median ${fmtMs(pooled.p50)}, p90 ${fmtMs(pooled.p90)}, p99 ${fmtMs(pooled.p99)}, max ${fmtMs(pooled.max)}.`,
        `workerd CPU per handshake (Worker + session object, including the empty resync stream and the close): ${fmtNum(cpuPerConnectMs)} ms, of it ${fmtNum(kernelPerConnectMs)} ms in the kernel (system time: the object's files created and synced, sockets).`,
      );

      // Storm.
      const stormHub: number[] = [];
      const stormWelcomed: number[] = [];
      let stormPgPeak = 0;
      let stormFailures = 0;
      let stormAttempts = 0;
      const stormKinds: Record<string, number> = {};
      let stormCpu = 0;
      let stormKernel = 0;
      let stormWall = 0;
      const stormEcho: number[] = [];
      for (let r = 0; r < stormReps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const clusters = await env.createClusters(stormSize, `storm${r}`);
        const pgs = new PgActivitySampler(env, 200);
        await pgs.start();
        takeHubLogCounts();
        cpu.start();
        const out = await storm(stormSize, (i) => hubAttempt(env.wsUrl, clusters[i] as BenchCluster), STORM_DEADLINE_MS);
        const stormLog = describeHubLog(takeHubLogCounts());
        const used = cpu.stop();
        stormCpu += used.cpuSeconds / stormReps;
        stormKernel += used.systemSeconds / stormReps;
        stormWall += used.wallSeconds / stormReps;
        const pgPeak = await pgs.stop();
        stormHub.push(out.seconds);
        stormWelcomed.push(out.welcomed);
        stormPgPeak = Math.max(stormPgPeak, pgPeak.peakServer);
        stormFailures += out.attempts - out.welcomed;
        stormAttempts += out.attempts;
        for (const [k, v] of Object.entries(out.failures)) {
          const kind = k.startsWith('HTTP 503') ? 'stormHttp503' : k.includes('1013') ? 'storm1013' : k.includes('4408') ? 'storm4408' : 'stormOtherFailures';
          stormKinds[kind] = (stormKinds[kind] ?? 0) + v;
        }
        const failures = Object.entries(out.failures)
          .map(([k, v]) => `${k} ×${v}`)
          .join(', ');
        const line = `storm rep ${r + 1}: ${out.welcomed}/${stormSize} welcomed in ${fmtNum(out.seconds)} s; ${out.attempts} attempts; failures: ${failures || 'none'}; workerd CPU ${fmtNum(used.cpuSeconds)} s (${fmtNum(used.systemSeconds)} s of it in the kernel) over ${fmtNum(used.wallSeconds)} s; Postgres connections to the bench database peaked at ${pgPeak.peak} (server-wide ${pgPeak.peakServer}, max_connections ${env.stack.maxConnections}); hub log: ${stormLog}`;
        evidence.push(`Hub ${line}.`);
        ctx.log(line);
        for (const op of out.ops) op.close();
        const eOut = await storm(stormSize, () => RawOperator.connect(echoUrl, 'x').then(async (op) => (await op.hello({ cluster_id: 'e' }), op)), 60_000);
        stormEcho.push(eOut.seconds);
        for (const op of eOut.ops) op.close();
        // Let the closed sessions finish closing (each publishes its disconnect with a statement)
        // and their connections go idle, so the next repetition starts from a quiet hub.
        await sleep(10_000);
      }

      const hubMedian = repeated(hubMed);
      // A storm that did not finish has no time: the figure is then "n/a" (not the median of the
      // repetitions that did finish), and the comparison says what happened in each.
      const stormR = stormHub.some((v) => !Number.isFinite(v))
        ? { ...repeated(stormHub), median: Number.NaN }
        : repeated(stormHub);
      return {
        name: 'handshake',
        title: this.title,
        method: [
          `${ctx.reps} repetitions of ${perRep} sequential fresh-session connects (one new cluster each, registered in Postgres), after 20 warm-up connects. Time = WebSocket open started → welcome received. Each session is closed after the hub's (empty) resync stream ends.`,
          `Storm: ${stormSize} operators (distinct clusters) start connecting at the same instant; a refused or failed attempt retries with the SDK's reconnect backoff (full jitter, base 1 s, cap 30 s). Time = start → last welcome. ${stormReps} repetition(s).`,
          'Baselines, same client, same counts: the bare ws echo server (connect + hello → welcome-shaped reply), Socket.IO 4 websocket-only connect (→ `connect` event).',
        ],
        figures: [
          {
            metric: 'connect → welcome, median',
            unit: 'ms',
            hub: hubMedian,
            baselines: [
              { label: 'ws echo', value: repeated(echoMed) },
              { label: 'Socket.IO', value: repeated(sioMed) },
            ],
            compare: `${ratio(hubMedian.median / repeated(echoMed).median)} echo, ${ratio(hubMedian.median / repeated(sioMed).median)} Socket.IO`,
            target: `≤ ${HANDSHAKE_TARGET_MS} ms`,
            met: hubMedian.median <= HANDSHAKE_TARGET_MS,
          },
          {
            metric: 'connect → welcome, p99',
            unit: 'ms',
            hub: repeated(hubP99),
            baselines: [
              { label: 'ws echo', value: repeated(echoP99) },
              { label: 'Socket.IO', value: repeated(sioP99) },
            ],
          },
          {
            metric: 'Postgres alone: new connection + first query',
            unit: 'ms',
            hub: repeated([conn.p50]),
            baselines: [
              { label: 'query on an open connection', value: repeated([median(queryMs)]) },
              ...(pgbench ? [{ label: 'pgbench -C connect, straight', value: repeated([pgbench.connectMs]) }] : []),
            ],
            compare: `a new connection costs ${ratio(conn.p50 / median(queryMs))} a query on an open one`,
          },
          {
            metric: `storm: ${stormSize} operators at once → all welcomed`,
            unit: 's',
            hub: stormR,
            baselines: [{ label: 'ws echo', value: repeated(stormEcho) }],
            compare: stormWelcomed.every((w) => w === stormSize)
              ? `${ratio(stormR.median / repeated(stormEcho).median)} echo`
              : `per repetition: ${stormHub.map((v, i) => (Number.isFinite(v) ? `${fmtNum(v)} s` : `${stormWelcomed[i]}/${stormSize} welcomed in ${STORM_DEADLINE_MS / 1000} s`)).join('; ')}`,
            target: `≤ ${STORM_TARGET_S} s`,
            met: Number.isFinite(stormR.max) && stormR.median <= STORM_TARGET_S,
          },
        ],
        evidence,
        data: {
          hubMedianMs: hubMedian.median,
          hubP99Ms: repeated(hubP99).median,
          echoMs: repeated(echoMed).median,
          sioMs: repeated(sioMed).median,
          upgradeMs: upgrade.p50,
          helloToWelcomeMs: pooled.p50 - upgrade.p50,
          resyncAfterWelcomeMs: resyncMs.length ? median(resyncMs) : Number.NaN,
          pgConnectMs: conn.p50,
          pgQueryMs: median(queryMs),
          pgCpuPerConnMs,
          pgbenchConnectMs: pgbench?.connectMs ?? Number.NaN,
          stormS: stormR.median,
          stormWelcomedMin: Math.min(...stormWelcomed),
          stormDeadlineS: STORM_DEADLINE_MS / 1000,
          stormAttempts,
          stormReps: stormHub.length,
          stormCpuS: stormCpu,
          stormWallS: stormWall,
          ...stormKinds,
          stormSize,
          cpuPerConnectMs,
          kernelPerConnectMs,
          stormKernelS: stormKernel,
          maxConnections: env.stack.maxConnections,
          stormPgPeak: stormPgPeak,
          stormFailures,
        },
      };
    } finally {
      await echo.stop();
      await sio.stop();
    }
  },
};
