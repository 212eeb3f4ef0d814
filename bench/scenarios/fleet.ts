/**
 * Fleet: many idle sessions, each operator pinging every 10 s (the advertised cadence). workerd
 * resident memory per session and CPU while idle, with the Postgres traffic the idle sessions
 * cause (ownership polls). Baselines: the ws echo server and Socket.IO holding the same number
 * of idle connections (each with its own heartbeat).
 */
import { io as ioClient, type Socket } from 'socket.io-client';
import { startEchoServer, startSocketIoServer } from '../lib/children';
import type { BenchCluster, BenchEnv } from '../lib/env';
import { fmtNum } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { mapLimit, RawOperator, sleep } from '../lib/operator';
import { postgresCpuSeconds, readCpuSeconds, readMem } from '../lib/proc';
import { median, repeated } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

const TARGET_KIB = 50;
const PING_MS = 10_000;
const OPEN_CONCURRENCY = 50;

interface Observation {
  rssBeforeKiB: number;
  rssKiB: number;
  perConnKiB: number;
  cpuCores: number;
  wallS: number;
}

/** RSS before, then the median RSS and CPU over an observation window. */
async function observe(pid: number, beforeKiB: number, n: number, ms: number): Promise<Observation> {
  const c0 = readCpuSeconds(pid);
  const t0 = performance.now();
  const rss: number[] = [];
  while (performance.now() - t0 < ms) {
    rss.push(readMem(pid).rssKiB);
    await sleep(500);
  }
  const wallS = (performance.now() - t0) / 1000;
  const cpu = readCpuSeconds(pid) - c0;
  const m = median(rss);
  return { rssBeforeKiB: beforeKiB, rssKiB: m, perConnKiB: (m - beforeKiB) / n, cpuCores: cpu / wallS, wallS };
}

async function dbCounters(env: BenchEnv): Promise<{ xacts: number; sessions: number }> {
  const [r] = await env.sql<{ x: string; s: string }>(
    'select xact_commit + xact_rollback as x, sessions as s from pg_stat_database where datname = current_database()',
  );
  return { xacts: Number(r?.x ?? 0), sessions: Number(r?.s ?? 0) };
}

/** A session with a pinger (first ping at a random point of the first period). */
function startPinging(op: RawOperator, timers: ReturnType<typeof setTimeout>[], stats: { pings: number; pongs: number }): void {
  op.onFrame((f) => {
    if (f.type === 'pong') stats.pongs++;
  });
  const first = setTimeout(() => {
    const ping = () => {
      if (op.closed) return;
      op.sendFrame('ping', {});
      stats.pings++;
    };
    ping();
    timers.push(setInterval(ping, PING_MS));
  }, Math.random() * PING_MS);
  timers.push(first);
}

interface OpenStats {
  failures: number;
  /** Upgrades that reached a session object (each one created an object, welcomed or not). */
  objects: number;
}

/** Open one session, retrying until welcomed or past the deadline; pinging starts at once (idle timeout is 30 s). */
async function openWithRetry(
  env: BenchEnv,
  c: BenchCluster,
  deadline: number,
  stats: OpenStats,
  onOpen: (op: RawOperator) => void,
): Promise<RawOperator | null> {
  for (;;) {
    if (performance.now() > deadline) return null;
    try {
      const op = await RawOperator.connect(env.wsUrl, c.token);
      stats.objects++;
      const end = op.next((f) => f.type === 'stream.end', 30_000);
      try {
        await op.hello({ cluster_id: c.name });
        await end;
      } catch (err) {
        op.terminate();
        throw err;
      }
      op.sendAck();
      onOpen(op);
      return op;
    } catch {
      stats.failures++;
      await sleep(250 + Math.random() * 1_000);
    }
  }
}

export const fleet: Scenario = {
  name: 'fleet',
  freshHub: true,
  budgetS: 120,
  title: 'Fleet: idle sessions pinging every 10 s — memory and CPU',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const { env } = ctx;
    const n = ctx.quick ? 100 : 1_000;
    const observeMs = ctx.quick ? 6_000 : 20_000;
    const settleMs = ctx.quick ? 3_000 : 6_000;
    const baselineMs = ctx.quick ? 3_000 : 8_000;
    /** Opening stops here: on a small Postgres the sessions already open can starve the rest (see the report). */
    const openCapMs = ctx.quick ? 30_000 : 60_000;
    const pid = env.workerdPid;
    const clusters = await env.createClusters(n, 'fleet');
    await sleep(2_000);
    takeHubLogCounts();

    // Hub.
    const hubBefore = readMem(pid).rssKiB;
    const t0 = performance.now();
    const openStats: OpenStats = { failures: 0, objects: 0 };
    const deadline = t0 + openCapMs;
    const timers: ReturnType<typeof setTimeout>[] = [];
    const pingStats = { pings: 0, pongs: 0 };
    const opened = await mapLimit(clusters, OPEN_CONCURRENCY, (c) =>
      openWithRetry(env, c, deadline, openStats, (op) => startPinging(op, timers, pingStats)),
    );
    const ops = opened.filter((o): o is RawOperator => o !== null);
    const connectS = (performance.now() - t0) / 1000;
    const established = ops.length;
    const connectLog = describeHubLog(takeHubLogCounts());
    await sleep(settleMs);
    const db0 = await dbCounters(env);
    const pg0 = postgresCpuSeconds();
    const pings0 = pingStats.pongs;
    const hub = await observe(pid, hubBefore, Math.max(1, established), observeMs);
    const pgCores = (postgresCpuSeconds() - pg0) / hub.wallS;
    const db1 = await dbCounters(env);
    const pongs = pingStats.pongs - pings0;
    const closedOps = ops.filter((o) => o.closed);
    const closed = closedOps.length;
    const closeCodes: Record<string, number> = {};
    for (const o of closedOps) closeCodes[String(o.closed?.code)] = (closeCodes[String(o.closed?.code)] ?? 0) + 1;
    const perObjectKiB = (hub.rssKiB - hubBefore) / Math.max(1, openStats.objects);
    const hwm = readMem(pid).hwmKiB;
    const idleLog = describeHubLog(takeHubLogCounts());
    for (const t of timers) clearTimeout(t);
    for (const op of ops) op.close();
    ctx.log(
      `fleet: ${established}/${n} hub sessions open after ${fmtNum(connectS)} s (${openStats.failures} failed attempts); workerd RSS ${fmtNum(hubBefore / 1024)} → ${fmtNum(hub.rssKiB / 1024)} MiB = ${fmtNum(hub.perConnKiB)} KiB/session; CPU ${fmtNum(hub.cpuCores)} cores; Postgres ${fmtNum(pgCores)} cores, ${fmtNum((db1.xacts - db0.xacts) / hub.wallS)} transactions/s, ${fmtNum((db1.sessions - db0.sessions) / hub.wallS)} new connections/s; ${closed} closed`,
    );
    await sleep(2_000);

    // Echo server baseline: same number of idle ws connections, same pings.
    const echo = await startEchoServer();
    let echoObs: Observation;
    try {
      const before = readMem(echo.pid).rssKiB;
      const eops = await mapLimit(clusters, 50, async () => {
        const op = await RawOperator.connect(`ws://127.0.0.1:${echo.port}`, 'x');
        await op.hello({ cluster_id: 'echo' });
        return op;
      });
      const et: ReturnType<typeof setTimeout>[] = [];
      for (const op of eops) startPinging(op, et, { pings: 0, pongs: 0 });
      await sleep(baselineMs / 2);
      echoObs = await observe(echo.pid, before, n, baselineMs);
      for (const t of et) clearTimeout(t);
      for (const op of eops) op.close();
    } finally {
      await echo.stop();
    }

    // Socket.IO baseline: idle clients with its own heartbeat (25 s).
    const sio = await startSocketIoServer(env.stack.databaseUrl, env.stack.pgWsProxy);
    let sioObs: Observation;
    try {
      const before = readMem(sio.pid).rssKiB;
      const sockets = await mapLimit(clusters, 50, (c) => {
        const s: Socket = ioClient(`http://127.0.0.1:${sio.port}`, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { cluster: c.uid } });
        return new Promise<Socket>((resolve, reject) => {
          s.once('connect', () => resolve(s));
          s.once('connect_error', reject);
        });
      });
      await sleep(baselineMs / 2);
      sioObs = await observe(sio.pid, before, n, baselineMs);
      for (const s of sockets) s.disconnect();
    } finally {
      await sio.stop();
    }

    const perSession = repeated([hub.perConnKiB]);
    const data = {
      n,
      established,
      objects: openStats.objects,
      perObjectKiB,
      openFailures: openStats.failures,
      openCapS: openCapMs / 1000,
      perSessionKiB: hub.perConnKiB,
      rssBeforeMiB: hubBefore / 1024,
      rssMiB: hub.rssKiB / 1024,
      cpuCores: hub.cpuCores,
      pgCores,
      xactsPerS: (db1.xacts - db0.xacts) / hub.wallS,
      connsPerS: (db1.sessions - db0.sessions) / hub.wallS,
      echoKiB: echoObs.perConnKiB,
      sioKiB: sioObs.perConnKiB,
      connectS,
      closed,
    };
    return {
      data,
      name: 'fleet',
      title: this.title,
      method: [
        `${fmtNum(n)} clusters, one session each, opened ${OPEN_CONCURRENCY} at a time (each waits for its welcome and the hub's empty resync stream, acks it). Each operator then pings every 10 s (first ping at a random point of the first 10 s) and sends nothing else.`,
        `Memory: median VmRSS of the hub's workerd over a ${observeMs / 1000} s window after ${settleMs / 1000} s of settling, minus VmRSS just before the sessions opened, divided by the number of sessions. CPU: workerd utime+stime over the window.`,
        `Baselines: the ws echo server and a Socket.IO 4 server (websocket only, recovery on, default 25 s heartbeat) holding ${fmtNum(n)} idle connections from the same client process (observed over ${baselineMs / 1000} s).`,
        'Runs on a freshly started hub (new workerd process, empty Durable Object storage, same database): memory starts from a clean process.',
        'One measurement per run (not repeated: opening the fleet is the expensive part); the per-session figure is an average over all sessions.',
      ],
      figures: [
        {
          metric: `workerd memory per idle session (${fmtNum(established)} sessions open)`,
          unit: 'KiB',
          hub: perSession,
          baselines: [
            { label: 'ws echo, per connection (Node)', value: repeated([echoObs.perConnKiB]) },
            { label: 'Socket.IO, per connection (Node)', value: repeated([sioObs.perConnKiB]) },
          ],
          target: `≤ ${TARGET_KIB} KiB`,
          met: perSession.median <= TARGET_KIB && established === n,
        },
        {
          metric: `CPU with ${fmtNum(established)} idle sessions`,
          unit: 'cores',
          hub: repeated([hub.cpuCores]),
          baselines: [
            { label: 'ws echo', value: repeated([echoObs.cpuCores]) },
            { label: 'Socket.IO', value: repeated([sioObs.cpuCores]) },
          ],
          compare: `${fmtNum((hub.cpuCores * 1e6) / Math.max(1, established))} µs of workerd CPU per session per second`,
        },
        {
          metric: 'Postgres load caused by the idle fleet',
          unit: 'transactions/s',
          hub: repeated([(db1.xacts - db0.xacts) / hub.wallS]),
          compare: `${fmtNum((db1.sessions - db0.sessions) / hub.wallS)} new connections/s; Postgres CPU ${fmtNum(pgCores)} cores`,
        },
      ],
      evidence: [
        `Opening: ${fmtNum(established)} of ${fmtNum(n)} sessions open after ${fmtNum(connectS)} s (${OPEN_CONCURRENCY} at a time, each retrying until welcomed; ${openStats.failures} failed attempts; opening stops at ${openCapMs / 1000} s). Hub log while opening: ${connectLog}.`,
        `Session objects created while opening (every upgrade that reached one, welcomed or refused): ${fmtNum(openStats.objects)}; workerd RSS growth per object ${fmtNum(perObjectKiB)} KiB (per open session ${fmtNum(hub.perConnKiB)} KiB).`,
        `workerd RSS ${fmtNum(hubBefore / 1024)} MiB before, ${fmtNum(hub.rssKiB / 1024)} MiB with the fleet idle (VmHWM ${fmtNum(hwm / 1024)} MiB); ${pongs} pongs in the ${fmtNum(hub.wallS)} s window (${fmtNum(pongs / hub.wallS)}/s; expected ≈ ${fmtNum(n / (PING_MS / 1000))}/s); ${closed} of the open sessions were closed by the hub by the end of the window${closed ? ` (close codes: ${Object.entries(closeCodes).map(([k, v]) => `${k} ×${v}`).join(', ')})` : ''}.`,
        `Idle Postgres traffic: ${fmtNum((db1.xacts - db0.xacts) / hub.wallS)} transactions/s and ${fmtNum((db1.sessions - db0.sessions) / hub.wallS)} new connections/s for ${fmtNum(n)} idle sessions (the ownership poll, every 5 s per session${(db1.sessions - db0.sessions) / hub.wallS >= 1 ? "; the session's connection closes after 3 s idle, so each poll reconnects" : ', on shared connections'}).`,
        `Hub log while idle: ${idleLog}.`,
        `Echo server: RSS ${fmtNum(echoObs.rssBeforeKiB / 1024)} → ${fmtNum(echoObs.rssKiB / 1024)} MiB; Socket.IO: ${fmtNum(sioObs.rssBeforeKiB / 1024)} → ${fmtNum(sioObs.rssKiB / 1024)} MiB.`,
      ],
    };
  },
};
