/**
 * Idle fleet (issue 12): many connected sessions doing nothing but the SDK's canonical ping every
 * 10 s, at the hub's default timers. How often each session object is woken, how many of them
 * are out of memory at any instant, what the fleet costs workerd (RSS, CPU) and Postgres.
 * Baselines: the ws echo server and Socket.IO holding the same number of idle connections.
 *
 * Residency is inferred, not sampled from inside workerd: each object keeps its own wake counter
 * (times of its last wakes, and how often it was constructed); the eviction delay of this
 * machine's workerd is measured first; then an object is in memory from each event for that
 * delay (bench/lib/residency.ts), and the construction counts check the model.
 */
import { io as ioClient, type Socket } from 'socket.io-client';
import { startEchoServer, startSocketIoServer } from '../lib/children';
import { fmtNum, pct } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { addKinds, baselineIdle, heapText, jsHeap, observe, openIdle, type Observation, type OpenStats } from '../lib/idle';
import { mapLimit, RawOperator, SDK_PING_MS, sleep } from '../lib/operator';
import { PgXactSampler } from '../lib/pgstat';
import { postgresCpuSeconds, readMem } from '../lib/proc';
import { ascending, countBetween, instantsBetween, outOfMemorySeries, predictedConstructions, spanBelow } from '../lib/residency';
import { median, repeated } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';
import { measureEvictionDelay, readAllWakes } from '../lib/wakes';

/** Issue 12's targets. */
export const FLEET_TARGETS = { wakesPerMin: 3, outOfMemory: 0.5, rssKiB: 200, cpuCores: 0.05, pgXactsPerS: 2 };
/** The hub's default LIVE_SWEEP_MS, in s: a session not checked for this long is poked by the fleet poll. */
const SWEEP_S = 300;
const OPEN_CONCURRENCY = 50;
const READ_CONCURRENCY = 8;

export const fleet: Scenario = {
  name: 'fleet',
  freshHub: true,
  profilesItself: true,
  budgetS: 480,
  title: 'Fleet: idle sessions pinging every 10 s — wakes, residency, memory, CPU, Postgres',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const { env } = ctx;
    const n = ctx.quick ? 100 : 1_000;
    // One whole LIVE_SWEEP_MS (5 min): every idle session is swept exactly once inside it, as in the steady state.
    const windowMs = ctx.quick ? 30_000 : SWEEP_S * 1000;
    // Past the opening's first silence deadlines (30 s after each session's last frame) and the
    // second ones, which still bunch (they follow the first by 20–30 s), and the readings' own effect.
    const settleMs = ctx.quick ? 15_000 : 60_000;
    const baselineMs = ctx.quick ? 3_000 : 8_000;
    const openCapMs = ctx.quick ? 30_000 : 60_000;
    const ladder = ctx.quick ? [8_000, 9_500, 10_500, 12_000] : [7_000, 8_000, 9_000, 9_500, 10_000, 10_500, 11_000, 12_000, 14_000];
    const pid = env.workerdPid;

    // 1. This machine's eviction delay.
    const ev = await measureEvictionDelay(env, ladder, ctx.quick ? 1 : 2, SDK_PING_MS);
    const delayMs = ev.delayMs;
    ctx.log(
      `eviction delay ≈ ${fmtNum(delayMs / 1000)} s (resident after ${fmtNum(ev.lastResidentMs / 1000)} s, evicted after ${fmtNum(ev.firstEvictedMs / 1000)} s; ${ev.probes.length} probes${ev.consistent ? '' : `, ${ev.misclassified} disagreeing`}${ev.disturbed ? `, ${ev.disturbed} disturbed` : ''})`,
    );
    if (!Number.isFinite(delayMs)) throw new Error('no probe object was evicted: cannot model residency');
    const clusters = await env.createClusters(n, 'fleet');
    await sleep(delayMs + 2_000); // the probe objects leave memory before the baseline RSS is read
    takeHubLogCounts();

    // 2. Open the fleet.
    const heapBefore = await jsHeap(ctx);
    const memBefore = readMem(pid);
    const hubBefore = memBefore.rssKiB;
    const t0 = performance.now();
    const openedAt = Date.now();
    const openStats: OpenStats = { failures: 0 };
    const opened = await mapLimit(clusters, OPEN_CONCURRENCY, (c) => openIdle(env, c, t0 + openCapMs, openStats));
    const ops = opened.filter((o): o is RawOperator => o !== null);
    const live = clusters.filter((_, i) => opened[i] !== null);
    const connectS = (performance.now() - t0) / 1000;
    const established = ops.length;
    await sleep(500);
    const memOpen = readMem(pid);
    const rssAllResidentKiB = memOpen.rssKiB;
    const heapOpen = await jsHeap(ctx);
    const connectLog = describeHubLog(takeHubLogCounts());

    // 3. Counters before (they also pin every object in memory for one eviction delay: settle covers it).
    const before = await readAllWakes(env, live, READ_CONCURRENCY);
    await sleep(settleMs);

    // 4. The window.
    const w0 = Date.now();
    const pings0 = ops.reduce((a, o) => a + o.pings, 0);
    const pongs0 = ops.reduce((a, o) => a + o.pongs, 0);
    const xacts = new PgXactSampler(env, 5_000);
    await xacts.start();
    const pg0 = postgresCpuSeconds();
    // With --profile, only the idle window is profiled (opening and readings are not idle work).
    const [hub, profile] = ctx.inspector
      ? await ctx.inspector.profile(() => observe(pid, hubBefore, Math.max(1, established), windowMs))
      : [await observe(pid, hubBefore, Math.max(1, established), windowMs), null];
    const pgCores = (postgresCpuSeconds() - pg0) / hub.wallS;
    const xs = await xacts.stop();
    const w1 = Date.now();
    const memEnd = readMem(pid);
    const heapEnd = await jsHeap(ctx);
    const heapEndGc = await jsHeap(ctx, true);
    const pings = ops.reduce((a, o) => a + o.pings, 0) - pings0;
    const pongs = ops.reduce((a, o) => a + o.pongs, 0) - pongs0;
    const idleLog = describeHubLog(takeHubLogCounts());
    const closedOps = ops.filter((o) => o.closed);
    const closeCodes: Record<string, number> = {};
    for (const o of closedOps) closeCodes[String(o.closed?.code)] = (closeCodes[String(o.closed?.code)] ?? 0) + 1;

    // 5. Counters after, then the model.
    const after = await readAllWakes(env, live, READ_CONCURRENCY);
    for (const op of ops) op.close();
    const pairs = live.flatMap((_, i) => {
      const a = before[i];
      const b = after[i];
      return a && b ? [{ a, b }] : [];
    });
    const timelines: number[][] = [];
    let windowWakes = 0;
    let uncovered = 0;
    let wakesMismatch = 0;
    let measuredConstructions = 0;
    let modelConstructions = 0;
    const kinds: Record<string, number> = {};
    for (const { a, b } of pairs) {
      const events = ascending([a.at, ...b.recent, b.sentAt]);
      timelines.push(events);
      windowWakes += countBetween(b.recent, w0, w1);
      if (b.recent.length >= 256 && (b.recent[0] as number) > w0) uncovered++;
      if (b.wakes - a.wakes !== countBetween(b.recent, a.at, b.sentAt)) wakesMismatch++;
      measuredConstructions += b.constructions - a.constructions;
      modelConstructions += predictedConstructions(events, a.at, b.sentAt, delayMs);
      addKinds(kinds, b.byKind, a.byKind);
    }
    const m = Math.max(1, pairs.length);
    const windowMin = (w1 - w0) / 60_000;
    const wakesPerMin = windowWakes / m / windowMin;
    const spanMin = median(pairs.map(({ a, b }) => b.sentAt - a.at)) / 60_000;
    const kindRates = Object.entries(kinds)
      .filter(([, v]) => v > 0)
      .sort((x, y) => y[1] - x[1])
      .map(([k, v]) => `${k} ${fmtNum(v / m / spanMin)}`);
    const instants = instantsBetween(w0, w1, 1_000);
    const series = outOfMemorySeries(timelines, instants, delayMs);
    const oom = {
      mean: series.reduce((a, x) => a + x, 0) / Math.max(1, series.length),
      min: Math.min(...series),
      max: Math.max(...series),
      instants: series.length,
    };
    // When the share dips below the target: while the sweep is due (every session claimed in the
    // opening is poked 300–305 s after its claim), or at other times too.
    const below = spanBelow(instants, series, FLEET_TARGETS.outOfMemory);
    const sweepFrom = openedAt + SWEEP_S * 1000;
    const sweepTo = openedAt + (connectS + SWEEP_S + 10) * 1000;
    const inSweep = (t: number) => t >= sweepFrom && t <= sweepTo;
    const minIn = (pick: (t: number) => boolean) => {
      const xs = series.filter((_, i) => pick(instants[i] as number));
      return xs.length ? Math.min(...xs) : Number.NaN;
    };
    const minSweep = minIn(inSweep);
    const minOutside = minIn((t) => !inSweep(t));
    const belowOutside = series.filter((x, i) => x < FLEET_TARGETS.outOfMemory && !inSweep(instants[i] as number)).length;
    // The lowest share in each 20 s of the window: shows waves of wakes, if any.
    const buckets: string[] = [];
    for (let t = w0; t < w1; t += 20_000) buckets.push(pct(minIn((x) => x >= t && x < t + 20_000)));
    const sinceOpen = (t: number) => (t - openedAt) / 1000;
    const xactsPerS = xs.perSecond;
    ctx.log(
      `fleet: ${established}/${n} open in ${fmtNum(connectS)} s; ${fmtNum(wakesPerMin)} wakes/session/min; out of memory ${pct(oom.mean)} (min ${pct(oom.min)}); RSS ${fmtNum(hub.perConnKiB)} KiB/session; CPU ${fmtNum(hub.cpuCores)} cores; Postgres ${fmtNum(xactsPerS)} tx/s; constructions ${measuredConstructions} (model ${modelConstructions}); ${closedOps.length} closed`,
    );
    await sleep(2_000);

    // 6. Baselines: the same number of idle connections, the same client.
    const echo = await startEchoServer();
    let echoObs: Observation;
    try {
      echoObs = await baselineIdle(
        echo.pid,
        async () => {
          const op = await RawOperator.connect(`ws://127.0.0.1:${echo.port}`, 'x', { firstPingMs: Math.random() * SDK_PING_MS });
          await op.hello({ cluster_id: 'echo' });
          return () => op.close();
        },
        n,
        baselineMs,
      );
    } finally {
      await echo.stop();
    }
    const sio = await startSocketIoServer(env.stack.databaseUrl, env.stack.pgWsProxy);
    let sioObs: Observation;
    try {
      let k = 0;
      sioObs = await baselineIdle(
        sio.pid,
        () => {
          const s: Socket = ioClient(`http://127.0.0.1:${sio.port}`, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { cluster: `c${k++}` } });
          return new Promise((resolve, reject) => {
            s.once('connect', () => resolve(() => s.disconnect()));
            s.once('connect_error', reject);
          });
        },
        n,
        baselineMs,
      );
    } finally {
      await sio.stop();
    }

    const t = FLEET_TARGETS;
    const data = {
      n,
      established,
      openFailures: openStats.failures,
      openCapS: openCapMs / 1000,
      connectS,
      windowS: (w1 - w0) / 1000,
      instants: oom.instants,
      evictionDelayS: delayMs / 1000,
      evictionResidentS: ev.lastResidentMs / 1000,
      evictionEvictedS: ev.firstEvictedMs / 1000,
      evictionProbes: ev.probes.length,
      evictionConsistent: ev.consistent ? 1 : 0,
      wakesPerMin,
      outOfMemoryMean: oom.mean,
      outOfMemoryMin: oom.min,
      outOfMemoryMax: oom.max,
      belowFromS: below ? sinceOpen(below.from) : Number.NaN,
      belowToS: below ? sinceOpen(below.to) : Number.NaN,
      belowInstants: below?.count ?? 0,
      outOfMemoryMinOutside: minOutside,
      outOfMemoryMinSweep: minSweep,
      belowOutsideSweep: belowOutside,
      sweepFromS: SWEEP_S,
      sweepToS: connectS + SWEEP_S + 10,
      windowFromS: sinceOpen(w0),
      windowToS: sinceOpen(w1),
      measuredConstructions,
      modelConstructions,
      constructionsPerMin: measuredConstructions / m / spanMin,
      perSessionKiB: hub.perConnKiB,
      allResidentKiB: (rssAllResidentKiB - hubBefore) / Math.max(1, established),
      rssBeforeMiB: hubBefore / 1024,
      rssMiB: hub.rssKiB / 1024,
      rssMinMiB: hub.rssMinKiB / 1024,
      anonBeforeMiB: memBefore.anonKiB / 1024,
      anonOpenMiB: memOpen.anonKiB / 1024,
      anonEndMiB: memEnd.anonKiB / 1024,
      fileBeforeMiB: memBefore.fileKiB / 1024,
      fileEndMiB: memEnd.fileKiB / 1024,
      ...(heapBefore && heapOpen && heapEnd && heapEndGc
        ? { heapBeforeMiB: heapBefore.usedMiB, heapOpenMiB: heapOpen.usedMiB, heapEndMiB: heapEnd.usedMiB, heapEndGcMiB: heapEndGc.usedMiB, heapTotalEndMiB: heapEnd.totalMiB }
        : {}),
      cpuCores: hub.cpuCores,
      pgCores,
      xactsPerS,
      xactsPeak5s: xs.peakPerSecond,
      xactsMedian5s: xs.medianPerSecond,
      connsPerS: xs.connectionsPerSecond,
      echoKiB: echoObs.perConnKiB,
      sioKiB: sioObs.perConnKiB,
      echoCores: echoObs.cpuCores,
      sioCores: sioObs.cpuCores,
      closed: closedOps.length,
      pings,
      pongs,
      ...Object.fromEntries(Object.entries(kinds).map(([k, v]) => [`kind_${k}`, v / m / spanMin])),
    };
    const allOpen = established === n;
    return {
      ...(profile ? { profile, profileScope: 'the idle window only' } : {}),
      data,
      name: 'fleet',
      title: this.title,
      method: [
        `Eviction delay first, on the fresh hub: ${ev.probes.length + ev.disturbed} sessions pinging as the fleet does (the runtime answers; nothing reaches their objects), each probed after its session's extra silence check (30–60 s after it opened, \`phaseCheckOffset\`); each one's wake counter is read, then read again after one of ${ladder.map((v) => fmtNum(v / 1000)).join(', ')} s: a higher construction count means the object was evicted in between (a probe woken in between is discarded). The delay used below is the threshold that separates resident from evicted probes.`,
        `${fmtNum(n)} clusters, one session each, opened ${OPEN_CONCURRENCY} at a time (welcome and the hub's empty resync stream; the operator acks it 50 ms later as the SDK does). Each operator then sends the SDK's canonical ping every 10 s (first at a random point of the first 10 s; \`ack\` = its cursor) and nothing else. The hub runs at its default timers (5 s fleet poll, 30 s silence, 5 min sweep): no overrides.`,
        `Every session's wake counter is read (\`GET /admin/clusters/{id}/session/wakes\`, ${READ_CONCURRENCY} at a time) once after opening and once after the window; the window starts ${settleMs / 1000} s after the first reading (past the opening's first silence deadline and the readings' own effect) and lasts ${fmtNum(windowMs / 1000, 0)} s — one whole sweep period (LIVE_SWEEP_MS), so each session's sweep poke falls inside it once, as in the steady state.`,
        'Wakes per session per minute: the wakes the objects recorded (their `recent` times) inside the window. Out of memory: at every second of the window, the share of objects with no event (wake, or one of the two readings) within the eviction delay before it; the target is on the lowest share at any instant. The model is checked against the objects\' own construction counters between the two readings.',
        `Memory: median VmRSS of the hub's workerd over the window minus VmRSS just before the fleet opened, per session. CPU: workerd utime+stime over the window. Postgres: transactions committed or rolled back in the bench database over the window (pg_stat_database, read from another database so the sampling does not count), Postgres CPU (all postgres processes).`,
        `Baselines: the ws echo server (answering the same pings) and a Socket.IO 4 server (websocket only, recovery on, its default 25 s heartbeat) holding ${fmtNum(n)} idle connections from the same client process (observed over ${baselineMs / 1000} s).`,
        'Runs on a freshly started hub (new workerd process, empty Durable Object storage, same database). One measurement per run (opening the fleet is the expensive part).',
      ],
      figures: [
        {
          metric: 'wakes per idle session per minute',
          unit: 'wakes/min',
          hub: repeated([wakesPerMin]),
          compare: `by kind (snapshot to snapshot): ${kindRates.join(', ') || 'none'}`,
          target: `≤ ${t.wakesPerMin}`,
          met: allOpen && wakesPerMin <= t.wakesPerMin,
        },
        {
          metric: 'idle session objects out of memory, lowest share at any instant',
          unit: '%',
          hub: repeated([oom.min * 100]),
          compare: `mean ${pct(oom.mean)}, highest ${pct(oom.max)} over ${oom.instants} instants; eviction delay ${fmtNum(delayMs / 1000)} s`,
          target: `≥ ${pct(t.outOfMemory)}`,
          met: allOpen && oom.min >= t.outOfMemory,
        },
        {
          metric: `workerd memory per idle session (${fmtNum(established)} sessions open)`,
          unit: 'KiB',
          hub: repeated([hub.perConnKiB]),
          baselines: [
            { label: 'ws echo, per connection (Node)', value: repeated([echoObs.perConnKiB]) },
            { label: 'Socket.IO, per connection (Node)', value: repeated([sioObs.perConnKiB]) },
          ],
          compare: `all objects resident (just opened): ${fmtNum((rssAllResidentKiB - hubBefore) / Math.max(1, established))} KiB per session`,
          target: `≤ ${t.rssKiB} KiB`,
          met: allOpen && hub.perConnKiB <= t.rssKiB,
        },
        {
          metric: `workerd CPU with ${fmtNum(established)} idle sessions`,
          unit: 'cores',
          hub: repeated([hub.cpuCores]),
          baselines: [
            { label: 'ws echo', value: repeated([echoObs.cpuCores]) },
            { label: 'Socket.IO', value: repeated([sioObs.cpuCores]) },
          ],
          compare: `${fmtNum((hub.cpuCores * 1e6) / Math.max(1, established))} µs of workerd CPU per session per second`,
          target: `≤ ${t.cpuCores} cores`,
          met: allOpen && hub.cpuCores <= t.cpuCores,
        },
        {
          metric: `Postgres load of ${fmtNum(established)} idle sessions`,
          unit: 'transactions/s',
          hub: repeated([xactsPerS]),
          compare: `5 s intervals: median ${fmtNum(xs.medianPerSecond)}, highest ${fmtNum(xs.peakPerSecond)}; ${fmtNum(xs.connectionsPerSecond)} new connections/s; Postgres CPU ${fmtNum(pgCores)} cores`,
          target: `≤ ${t.pgXactsPerS} transactions/s`,
          met: allOpen && xactsPerS <= t.pgXactsPerS,
        },
      ],
      evidence: [
        `Eviction delay on this machine: objects left alone ${ev.probes.filter((p) => !p.evicted).map((p) => fmtNum(p.idleMs / 1000)).join(', ') || '—'} s were still resident, ${ev.probes.filter((p) => p.evicted).map((p) => fmtNum(p.idleMs / 1000)).join(', ') || '—'} s had been evicted${ev.consistent ? '' : ` (${ev.misclassified} probe(s) disagree with the threshold)`}${ev.disturbed ? `; ${ev.disturbed} probe(s) discarded (woken between the readings)` : ''}: delay ≈ ${fmtNum(delayMs / 1000)} s.`,
        `Opening: ${fmtNum(established)} of ${fmtNum(n)} sessions open after ${fmtNum(connectS)} s (${OPEN_CONCURRENCY} at a time; ${openStats.failures} failed attempts; opening stops at ${openCapMs / 1000} s). Hub log while opening: ${connectLog}.`,
        `Residency model check: between the two readings the objects counted ${fmtNum(measuredConstructions, 0)} constructions (${fmtNum(measuredConstructions / m / spanMin)} per session per minute); the model predicts ${fmtNum(modelConstructions, 0)} from the wake times and the ${fmtNum(delayMs / 1000)} s delay (${pct(modelConstructions / Math.max(1, measuredConstructions))} of measured). Wake counts agree with the recorded times for ${fmtNum(pairs.length - wakesMismatch, 0)} of ${fmtNum(pairs.length, 0)} sessions${uncovered ? `; ${uncovered} sessions woke more than 256 times, so their window is undercounted` : ''}.`,
        below
          ? `Out of memory below ${pct(FLEET_TARGETS.outOfMemory)} at ${below.count} of ${oom.instants} instants (${belowOutside} of them outside the sweep), between ${fmtNum(sinceOpen(below.from), 0)} and ${fmtNum(sinceOpen(below.to), 0)} s after the fleet started opening; the window is ${fmtNum(sinceOpen(w0), 0)}–${fmtNum(sinceOpen(w1), 0)} s, the claims were made 0–${fmtNum(connectS, 0)} s, so the sweep's pokes fall due about ${fmtNum(SWEEP_S, 0)}–${fmtNum(connectS + SWEEP_S + 10, 0)} s. Lowest share while the sweep is due ${pct(minSweep)}, at any other time ${pct(minOutside)}.`
          : `Out of memory at or above ${pct(FLEET_TARGETS.outOfMemory)} at every one of the ${oom.instants} instants.`,
        `Lowest share out of memory in each 20 s of the window, in order: ${buckets.join(', ')}.`,
        `Wakes by kind, per session per minute over the ${fmtNum(spanMin)} min between the readings: ${kindRates.join(', ') || 'none'} (alarm: a deadline of the session's clock, here the 30 s silence check; message: a frame that reached the object; check: a fleet-poll poke; poke: desired state).`,
        `Pings in the window: ${fmtNum(pings, 0)} sent, ${fmtNum(pongs, 0)} pongs received; the pings that reached an object are among its \`message\` wakes, the rest the runtime answered. ${closedOps.length} of the open sessions were closed by the hub${closedOps.length ? ` (close codes: ${Object.entries(closeCodes).map(([k, v]) => `${k} ×${v}`).join(', ')})` : ''}.`,
        `workerd RSS ${fmtNum(hubBefore / 1024)} MiB before the fleet, ${fmtNum(rssAllResidentKiB / 1024)} MiB just after opening (all resident), median ${fmtNum(hub.rssKiB / 1024)} MiB (lowest ${fmtNum(hub.rssMinKiB / 1024)}) over the window. Of it anonymous (heaps) / file-backed: ${fmtNum(memBefore.anonKiB / 1024)} / ${fmtNum(memBefore.fileKiB / 1024)} MiB before, ${fmtNum(memOpen.anonKiB / 1024)} / ${fmtNum(memOpen.fileKiB / 1024)} MiB after opening, ${fmtNum(memEnd.anonKiB / 1024)} / ${fmtNum(memEnd.fileKiB / 1024)} MiB at the window's end.`,
        ...(heapBefore
          ? [
              `JS heap of the hub isolate (inspector, \`Runtime.getHeapUsage\`, used of allocated): ${heapText(heapBefore)} before the fleet, ${heapText(heapOpen)} just after opening, ${heapText(heapEnd)} at the window's end, ${heapText(heapEndGc)} after a forced GC (\`HeapProfiler.collectGarbage\`).`,
            ]
          : []),
        `Postgres over the window: ${fmtNum(xactsPerS)} transactions/s in the bench database (5 s intervals: median ${fmtNum(xs.medianPerSecond)}, highest ${fmtNum(xs.peakPerSecond)}), ${fmtNum(xs.connectionsPerSecond)} new connections/s, ${fmtNum(pgCores)} cores of Postgres CPU (all processes, shared server).`,
        `Hub log while idle: ${idleLog}.`,
        `Echo server: RSS ${fmtNum(echoObs.rssBeforeKiB / 1024)} → ${fmtNum(echoObs.rssKiB / 1024)} MiB; Socket.IO: ${fmtNum(sioObs.rssBeforeKiB / 1024)} → ${fmtNum(sioObs.rssKiB / 1024)} MiB.`,
      ],
    };
  },
};
