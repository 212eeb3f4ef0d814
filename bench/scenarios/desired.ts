/**
 * Desired fan-out: admin PUT of a deployment → the deployment.desired frame at the operator.
 * Single changes one at a time (latency), a burst of single PUTs (time until the operator has
 * all of them), and the same number of changes in one bulk request. Baseline: Socket.IO
 * delivering the same payloads from an HTTP PUT, without and with the same Postgres write the
 * hub's admin API makes (for the bulk request: the hub's one bulk statement).
 */
import { startSocketIoServer } from '../lib/children';
import type { BenchCluster, BenchEnv } from '../lib/env';
import { fmtMs, fmtNum, ratio } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { mapLimit, RawOperator } from '../lib/operator';
import { bulkDesiredBody, DESIRED_BODY } from '../lib/payloads';
import { PgWaitSampler } from '../lib/pgstat';
import { readCpuSeconds } from '../lib/proc';
import { sioConnect } from '../lib/sio';
import { median, repeated, summarize } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

/** Issue 13: 1,000 changes in one bulk request at the operator within this. */
const BULK_TARGET_MS = 150;

/** Resolves per deployment_id when its frame arrives. */
class Arrivals {
  private waiting = new Map<string, (at: number) => void>();
  private early = new Map<string, number>();
  expect(id: string): Promise<number> {
    const at = this.early.get(id);
    if (at !== undefined) {
      this.early.delete(id);
      return Promise.resolve(at);
    }
    return new Promise((resolve) => this.waiting.set(id, resolve));
  }
  arrived(id: string, at: number): void {
    const w = this.waiting.get(id);
    if (w) {
      this.waiting.delete(id);
      w(at);
    } else this.early.set(id, at);
  }
}

async function put(url: string, headers: Record<string, string>, body: unknown): Promise<number> {
  const res = await fetch(url, { method: 'PUT', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  await res.text();
  if (res.status !== 200) throw new Error(`PUT ${url}: ${res.status}`);
  return res.status;
}

interface Target {
  label: string;
  /** PUT one change; returns when the HTTP response arrives. */
  put(deploymentId: string): Promise<unknown>;
  /** PUT many changes in one request. */
  putMany(deploymentIds: string[]): Promise<unknown>;
  arrivals: Arrivals;
}


/** Sequential single changes: PUT start → frame at the operator. */
async function singles(t: Target, n: number, tag: string): Promise<{ delivery: number[]; putMs: number[] }> {
  const delivery: number[] = [];
  const putMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${tag}-${i}`;
    const arrived = t.arrivals.expect(id);
    const t0 = performance.now();
    await t.put(id);
    putMs.push(performance.now() - t0);
    delivery.push((await arrived) - t0);
  }
  return { delivery, putMs };
}

/**
 * Sequential single changes to several targets taken in turns (one change each, then the next
 * round), so a machine that speeds up or slows down during the measurement moves every target
 * alike instead of whichever ran in that stretch.
 */
async function singlesInTurn(targets: Target[], n: number, tag: string): Promise<{ delivery: number[]; putMs: number[] }[]> {
  const out = targets.map(() => ({ delivery: [] as number[], putMs: [] as number[] }));
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < targets.length; k++) {
      const one = await singles(targets[k] as Target, 1, `${tag}-${k}-${i}`);
      out[k]?.delivery.push(...one.delivery);
      out[k]?.putMs.push(...one.putMs);
    }
  }
  return out;
}

/** The HTTP floor of several servers, taken in turns as the singles are. */
async function floorsInTurn(urls: string[], n: number): Promise<number[]> {
  const xs = urls.map(() => [] as number[]);
  for (let i = 0; i < n + 10; i++) {
    for (let k = 0; k < urls.length; k++) {
      const t0 = performance.now();
      const res = await fetch(urls[k] as string);
      await res.text();
      if (i >= 10) xs[k]?.push(performance.now() - t0);
    }
  }
  return xs.map(median);
}

/** n changes with `concurrency` PUTs in flight: ms until the operator has all, and each one's latency. */
async function burst(t: Target, n: number, concurrency: number, tag: string): Promise<{ totalMs: number; latencies: number[] }> {
  const ids = Array.from({ length: n }, (_, i) => `${tag}-${i}`);
  const t0 = performance.now();
  const latencies: number[] = [];
  const all = ids.map((id) => t.arrivals.expect(id));
  await mapLimit(ids, concurrency, async (id, i) => {
    const s = performance.now();
    await t.put(id);
    void all[i]?.then((at) => latencies.push(at - s));
  });
  const last = Math.max(...(await Promise.all(all)));
  return { totalMs: last - t0, latencies };
}

/** n changes in one request: ms until the operator has all, and until the response. */
/** `fn` with the bench database's backend waits sampled meanwhile: "Lock: transactionid 2.1, CPU 0.4, …" (average active backends). */
interface Waits {
  text: string;
  /** Average active backends per sample, and of them waiting on a lock. */
  active: number;
  lock: number;
}

async function withWaits<T>(env: BenchEnv, fn: () => Promise<T>): Promise<[T, Waits]> {
  const w = new PgWaitSampler(env, 50);
  await w.start();
  let r: T;
  try {
    r = await fn();
  } finally {
    // stop below
  }
  const s = await w.stop();
  return [
    r,
    {
      text: `${s.byWait.slice(0, 5).map((x) => `${x.wait} ${fmtNum(x.avg)}`).join(', ') || 'none active'} (${s.samples} samples)`,
      active: s.byWait.reduce((a, x) => a + x.avg, 0),
      lock: s.byWait.filter((x) => x.wait.startsWith('Lock')).reduce((a, x) => a + x.avg, 0),
    },
  ];
}

/** `fn` with the workerd CPU seconds it took (the hub's process: Worker, gateway and session objects). */
async function withCpu<T>(pid: number, fn: () => Promise<T>): Promise<[T, number]> {
  const c0 = readCpuSeconds(pid);
  const r = await fn();
  return [r, readCpuSeconds(pid) - c0];
}

async function bulkOnce(t: Target, n: number, tag: string): Promise<{ totalMs: number; responseMs: number; firstMs: number }> {
  const ids = Array.from({ length: n }, (_, i) => `${tag}-${i}`);
  const all = ids.map((id) => t.arrivals.expect(id));
  const t0 = performance.now();
  await t.putMany(ids);
  const responseMs = performance.now() - t0;
  const at = await Promise.all(all);
  return { totalMs: Math.max(...at) - t0, responseMs, firstMs: Math.min(...at) - t0 };
}

export const desired: Scenario = {
  name: 'desired',
  budgetS: 115,
  title: 'Desired fan-out: admin PUT → frame at the operator',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const { env } = ctx;
    const singlesN = ctx.quick ? 20 : 50;
    const burstReps = ctx.quick ? 1 : Math.min(ctx.reps, 2);
    const burstN = ctx.quick ? 200 : 1_000;
    const concurrency = 16;
    const sio = await startSocketIoServer(env.stack.databaseUrl, env.stack.pgWsProxy);
    try {
      const [hubCluster, sioCluster] = await env.createClusters(2, 'desired');
      const hc = hubCluster as BenchCluster;
      const sc = sioCluster as BenchCluster;

      // Hub operator: reads the resync stream, then notes deployment.desired frames; acks and
      // pings as the SDK does (an ack 50 ms after its cursor moves, a canonical ping every 10 s).
      const op = await RawOperator.connect(env.wsUrl, hc.token);
      const end = op.next((f) => f.type === 'stream.end');
      await op.hello({ cluster_id: hc.name });
      await end;
      const hubArrivals = new Arrivals();
      op.onFrame((f, at) => {
        if (f.type === 'deployment.desired') hubArrivals.arrived(String(f.payload.deployment_id), at);
      });
      const adminHeaders = { authorization: `Bearer ${env.vars.ADMIN_TOKEN}` };
      const hub: Target = {
        label: 'hub',
        arrivals: hubArrivals,
        put: (id) => put(`${env.hubUrl}/admin/clusters/${hc.uid}/deployments/${id}`, adminHeaders, DESIRED_BODY),
        putMany: (ids) => put(`${env.hubUrl}/admin/clusters/${hc.uid}/deployments`, adminHeaders, bulkDesiredBody(ids)),
      };

      const sioUrl = `http://127.0.0.1:${sio.port}`;
      const sioClient = await sioConnect(sioUrl, sc.uid);
      const sioArrivals = new Arrivals();
      sioClient.onDesired((p, at) => sioArrivals.arrived(String(p.deployment_id), at));
      const sioPlain: Target = {
        label: 'Socket.IO',
        arrivals: sioArrivals,
        put: (id) => put(`${sioUrl}/clusters/${sc.uid}/deployments/${id}`, {}, DESIRED_BODY),
        putMany: (ids) => put(`${sioUrl}/clusters/${sc.uid}/deployments`, {}, bulkDesiredBody(ids)),
      };
      const sioDb: Target = {
        label: 'Socket.IO + Postgres write',
        arrivals: sioArrivals,
        put: (id) => put(`${sioUrl}/clusters/${sc.uid}/deployments/${id}?db=1`, {}, DESIRED_BODY),
        putMany: (ids) => put(`${sioUrl}/clusters/${sc.uid}/deployments?db=1`, {}, bulkDesiredBody(ids)),
      };

      // Warm-up.
      await singles(hub, 10, 'warm-h');
      await singles(sioPlain, 10, 'warm-s');
      await singles(sioDb, 10, 'warm-d');
      await bulkOnce(hub, 100, 'warm-bh');
      await bulkOnce(sioDb, 100, 'warm-bd');
      takeHubLogCounts();

      const med = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const p99 = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const putMs: number[] = [];
      const floor = { hub: [] as number[], sio: [] as number[] };
      const burstT = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const burstP99: number[] = [];
      const bulkT = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const bulkResponse: number[] = [];
      let waits: { hub: Waits; sio: Waits } | null = null;
      /** workerd CPU: ms per single change, s per burst, s per bulk request. */
      const cpu = { single: [] as number[], burst: [] as number[], bulk: [] as number[] };
      const bulkFirst: number[] = [];
      for (let r = 0; r < ctx.reps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const [bh1, bulkCpu] = await withCpu(env.workerdPid, () => bulkOnce(hub, burstN, `m${r}-h`));
        cpu.bulk.push(bulkCpu);
        const bs1 = await bulkOnce(sioPlain, burstN, `m${r}-s`);
        const bd1 = await bulkOnce(sioDb, burstN, `m${r}-d`);
        bulkT.hub.push(bh1.totalMs);
        bulkT.sio.push(bs1.totalMs);
        bulkT.sioDb.push(bd1.totalMs);
        bulkResponse.push(bh1.responseMs);
        bulkFirst.push(bh1.firstMs);
        // workerd's CPU over the turns is the hub's: it does nothing while the others are served.
        const [[h, s, d], singleCpu] = await withCpu(env.workerdPid, () => singlesInTurn([hub, sioPlain, sioDb], singlesN, `s${r}`));
        if (!h || !s || !d) throw new Error('singlesInTurn: a target without results');
        cpu.single.push((singleCpu * 1000) / singlesN);
        const [hubFloor, sioFloor] = await floorsInTurn([`${env.hubUrl}/no-such-route`, `${sioUrl}/no-such-route`], singlesN);
        floor.hub.push(hubFloor as number);
        floor.sio.push(sioFloor as number);
        putMs.push(median(h.putMs));
        med.hub.push(median(h.delivery));
        med.sio.push(median(s.delivery));
        med.sioDb.push(median(d.delivery));
        p99.hub.push(summarize(h.delivery).p99);
        p99.sio.push(summarize(s.delivery).p99);
        p99.sioDb.push(summarize(d.delivery).p99);
        const bulkLine = `bulk ${burstN}: hub ${fmtMs(bh1.totalMs)} / ${fmtMs(bs1.totalMs)} / ${fmtMs(bd1.totalMs)}`;
        if (r >= burstReps) {
          ctx.log(`desired rep ${r + 1}: single hub ${fmtMs(median(h.delivery))} / Socket.IO ${fmtMs(median(s.delivery))} / Socket.IO+PG ${fmtMs(median(d.delivery))}; ${bulkLine}`);
          continue;
        }
        const [[bh, burstCpu], hubWaits] = await withWaits(env, () => withCpu(env.workerdPid, () => burst(hub, burstN, concurrency, `b${r}-h`)));
        cpu.burst.push(burstCpu);
        const bs = await burst(sioPlain, burstN, concurrency, `b${r}-s`);
        const [bd, sioWaits] = await withWaits(env, () => burst(sioDb, burstN, concurrency, `b${r}-d`));
        if (r === 0) waits = { hub: hubWaits, sio: sioWaits };
        burstT.hub.push(bh.totalMs);
        burstT.sio.push(bs.totalMs);
        burstT.sioDb.push(bd.totalMs);
        burstP99.push(summarize(bh.latencies).p99);
        ctx.log(
          `desired rep ${r + 1}: single hub ${fmtMs(median(h.delivery))} / Socket.IO ${fmtMs(median(s.delivery))} / Socket.IO+PG ${fmtMs(median(d.delivery))}; burst ${burstN}: hub ${fmtMs(bh.totalMs)} / ${fmtMs(bs.totalMs)} / ${fmtMs(bd.totalMs)}; ${bulkLine}`,
        );
      }
      const hubLog = describeHubLog(takeHubLogCounts());
      op.close();
      sioClient.socket.disconnect();

      const hubMed = repeated(med.hub);
      const sioMed = repeated(med.sio);
      const sioDbMed = repeated(med.sioDb);
      const hubBurst = repeated(burstT.hub);
      const sioBurst = repeated(burstT.sio);
      const sioDbBurst = repeated(burstT.sioDb);
      const hubBulk = repeated(bulkT.hub);
      const sioBulk = repeated(bulkT.sio);
      const sioDbBulk = repeated(bulkT.sioDb);
      return {
        name: 'desired',
        title: this.title,
        method: [
          `Single changes: ${singlesN} sequential PUTs per repetition to each server, in turns (one to the hub, one to Socket.IO, one to Socket.IO + Postgres, and again), so the machine's drift during a repetition moves all three alike; each a new deployment id; latency = PUT request started → its deployment.desired frame received by the operator (a raw ws client that acks every 100 frames). ${ctx.reps} repetitions.`,
          `Burst: ${fmtNum(burstN)} PUTs with ${concurrency} in flight; time = first PUT started → last frame received; ${burstReps} repetition(s).`,
          `Bulk: ${fmtNum(burstN)} new deployments in one \`PUT /admin/clusters/{id}/deployments\`; time = request started → the last of their frames received; once per repetition, before the singles.`,
          'The hub\'s operator is a raw ws client that acks as the SDK does (50 ms after its cursor moves, unless a frame carried it) and sends the canonical ping every 10 s.',
          'Socket.IO baseline: a Node HTTP server with Socket.IO 4 (connection state recovery on, websocket only); PUT → `io.to(cluster).emit(...)` of the same payload. "+ Postgres write": the same single-statement upsert and revision bump the hub\'s admin API runs, through the same Neon driver and proxy, before the emit.',
        ],
        figures: [
          {
            metric: 'single change: PUT → frame at operator, median',
            unit: 'ms',
            hub: hubMed,
            baselines: [
              { label: 'Socket.IO', value: sioMed },
              { label: 'Socket.IO + Postgres write', value: sioDbMed },
            ],
            compare: `${ratio(hubMed.median / sioMed.median)} Socket.IO, ${ratio(hubMed.median / sioDbMed.median)} Socket.IO+PG`,
            target: '≤ Socket.IO + Postgres',
            met: hubMed.median <= sioDbMed.median,
          },
          {
            metric: 'single change, p99',
            unit: 'ms',
            hub: repeated(p99.hub),
            baselines: [
              { label: 'Socket.IO', value: repeated(p99.sio) },
              { label: 'Socket.IO + Postgres write', value: repeated(p99.sioDb) },
            ],
          },
          {
            metric: `burst of ${fmtNum(burstN)} single PUTs → all at operator`,
            unit: 'ms',
            hub: hubBurst,
            baselines: [
              { label: 'Socket.IO', value: sioBurst },
              { label: 'Socket.IO + Postgres write', value: sioDbBurst },
            ],
            compare: `${ratio(hubBurst.median / sioBurst.median)} Socket.IO, ${ratio(hubBurst.median / sioDbBurst.median)} Socket.IO+PG`,
            target: '≤ Socket.IO + Postgres',
            met: hubBurst.median <= sioDbBurst.median,
          },
          {
            metric: `${fmtNum(burstN)} changes in one bulk request → all at operator`,
            unit: 'ms',
            hub: hubBulk,
            baselines: [
              { label: 'Socket.IO', value: sioBulk },
              { label: 'Socket.IO + Postgres (one bulk statement)', value: sioDbBulk },
            ],
            compare: `${ratio(hubBulk.median / sioBulk.median)} Socket.IO, ${ratio(hubBulk.median / sioDbBulk.median)} Socket.IO+PG`,
            target: `≤ ${BULK_TARGET_MS} ms`,
            met: hubBulk.median <= BULK_TARGET_MS,
          },
        ],
        evidence: [
          `Hub admin PUT response time (stored in Postgres, poke sent): median ${fmtMs(repeated(putMs).median)}; the poke leaves in parallel with the response and carries the change, so delivery ≈ the PUT's statement + the poke + stamping and sending; it often arrives before the response.`,
          `HTTP floor, a GET the server answers 404 without work: hub (a Worker route in workerd) ${fmtMs(repeated(floor.hub).median)}, Socket.IO's Node http server ${fmtMs(repeated(floor.sio).median)}: of the hub's ${fmtMs(hubMed.median)} against Socket.IO+PG's ${fmtMs(sioDbMed.median)}, ${fmtMs(repeated(floor.hub).median - repeated(floor.sio).median)} is the runtime's request entry before any hub code runs.`,
          `Hub burst: per-change latency p99 ${fmtMs(repeated(burstP99).median)}; throughput ≈ ${fmtNum((burstN / hubBurst.median) * 1000)} changes/s (Socket.IO ${fmtNum((burstN / sioBurst.median) * 1000)}, Socket.IO+PG ${fmtNum((burstN / sioDbBurst.median) * 1000)}).`,
          `workerd CPU (the hub's one process: Worker, gateway and session objects): ${fmtMs(repeated(cpu.single).median)} per single change (incl. the operator's acks); ${fmtNum(repeated(cpu.burst).median)} s over a ${fmtNum(hubBurst.median / 1000)} s burst (${fmtNum(repeated(cpu.burst).median / (hubBurst.median / 1000))} cores, ${fmtMs((repeated(cpu.burst).median * 1000) / burstN)} per change); ${fmtMs(repeated(cpu.bulk).median * 1000)} for the bulk request of ${fmtNum(burstN)}.`,
          `Postgres during the first burst (active backends of the bench database by wait event, sampled every 50 ms, average per sample): hub ${waits?.hub.text ?? 'n/a'}; Socket.IO + Postgres ${waits?.sio.text ?? 'n/a'}.`,
          `Hub bulk request: response after ${fmtMs(repeated(bulkResponse).median)} (stored in Postgres), first frame at the operator after ${fmtMs(repeated(bulkFirst).median)}, last after ${fmtMs(hubBulk.median)}.`,
          `Hub log: ${hubLog}.`,
        ],
        data: {
          hubMs: hubMed.median,
          sioMs: sioMed.median,
          sioDbMs: sioDbMed.median,
          putMs: repeated(putMs).median,
          hubFloorMs: repeated(floor.hub).median,
          sioFloorMs: repeated(floor.sio).median,
          burstN,
          hubBurstMs: hubBurst.median,
          sioBurstMs: sioBurst.median,
          sioDbBurstMs: sioDbBurst.median,
          hubBulkMs: hubBulk.median,
          sioBulkMs: sioBulk.median,
          sioDbBulkMs: sioDbBulk.median,
          bulkResponseMs: repeated(bulkResponse).median,
          bulkFirstMs: repeated(bulkFirst).median,
          hubP99Ms: repeated(p99.hub).median,
          cpuPerSingleMs: repeated(cpu.single).median,
          burstCpuS: repeated(cpu.burst).median,
          bulkCpuMs: repeated(cpu.bulk).median * 1000,
          burstHubActiveAvg: waits?.hub.active ?? Number.NaN,
          burstHubLockAvg: waits?.hub.lock ?? Number.NaN,
          burstSioActiveAvg: waits?.sio.active ?? Number.NaN,
          burstP99Ms: repeated(burstP99).median,
          concurrency,
        },
      };
    } finally {
      await sio.stop();
    }
  },
};
