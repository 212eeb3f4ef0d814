/**
 * Desired fan-out: admin PUT of a deployment → the deployment.desired frame at the operator.
 * Single changes one at a time (latency), then a burst of changes (time until the operator has
 * all of them). Baseline: Socket.IO delivering the same payloads from an HTTP PUT, without and
 * with the same Postgres write the hub's admin API makes.
 */
import { startSocketIoServer } from '../lib/children';
import { SERVING, type BenchCluster } from '../lib/env';
import { fmtMs, fmtNum, ratio } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { mapLimit, RawOperator } from '../lib/operator';
import { sioConnect } from '../lib/sio';
import { median, repeated, summarize } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

const BODY = { workload_id: 'llama-70b-chat', min_replicas: 2, max_replicas: 4, serving: SERVING };

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
  arrivals: Arrivals;
}

/** Median of n sequential GETs of a path the server answers 404 without work: the HTTP floor. */
async function emptyRoundTrip(url: string, n: number): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < n + 10; i++) {
    const t0 = performance.now();
    const res = await fetch(url);
    await res.text();
    if (i >= 10) xs.push(performance.now() - t0);
  }
  return median(xs);
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

      // Hub operator: reads the resync stream, then counts deployment.desired frames; acks every 100.
      const op = await RawOperator.connect(env.wsUrl, hc.token);
      const end = op.next((f) => f.type === 'stream.end');
      await op.hello({ cluster_id: hc.name });
      await end;
      op.sendAck();
      const hubArrivals = new Arrivals();
      let sinceAck = 0;
      op.onFrame((f, at) => {
        if (f.type === 'deployment.desired') {
          hubArrivals.arrived(String(f.payload.deployment_id), at);
          if (++sinceAck >= 100) {
            sinceAck = 0;
            op.sendAck();
          }
        }
      });
      const adminHeaders = { authorization: `Bearer ${env.vars.ADMIN_TOKEN}` };
      const hub: Target = {
        label: 'hub',
        arrivals: hubArrivals,
        put: (id) => put(`${env.hubUrl}/admin/clusters/${hc.uid}/deployments/${id}`, adminHeaders, BODY),
      };

      const sioUrl = `http://127.0.0.1:${sio.port}`;
      const sioClient = await sioConnect(sioUrl, sc.uid);
      const sioArrivals = new Arrivals();
      sioClient.onDesired((p, at) => sioArrivals.arrived(String(p.deployment_id), at));
      const sioPlain: Target = {
        label: 'Socket.IO',
        arrivals: sioArrivals,
        put: (id) => put(`${sioUrl}/clusters/${sc.uid}/deployments/${id}`, {}, BODY),
      };
      const sioDb: Target = {
        label: 'Socket.IO + Postgres write',
        arrivals: sioArrivals,
        put: (id) => put(`${sioUrl}/clusters/${sc.uid}/deployments/${id}?db=1`, {}, BODY),
      };

      // Warm-up.
      await singles(hub, 10, 'warm-h');
      await singles(sioPlain, 10, 'warm-s');
      await singles(sioDb, 10, 'warm-d');
      takeHubLogCounts();

      const med = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const p99 = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const putMs: number[] = [];
      const floor = { hub: [] as number[], sio: [] as number[] };
      const burstT = { hub: [] as number[], sio: [] as number[], sioDb: [] as number[] };
      const burstP99: number[] = [];
      for (let r = 0; r < ctx.reps; r++) {
        if (r > 0 && ctx.overBudget()) break;
        const h = await singles(hub, singlesN, `s${r}-h`);
        const s = await singles(sioPlain, singlesN, `s${r}-s`);
        const d = await singles(sioDb, singlesN, `s${r}-d`);
        floor.hub.push(await emptyRoundTrip(`${env.hubUrl}/no-such-route`, singlesN));
        floor.sio.push(await emptyRoundTrip(`${sioUrl}/no-such-route`, singlesN));
        putMs.push(median(h.putMs));
        med.hub.push(median(h.delivery));
        med.sio.push(median(s.delivery));
        med.sioDb.push(median(d.delivery));
        p99.hub.push(summarize(h.delivery).p99);
        p99.sio.push(summarize(s.delivery).p99);
        p99.sioDb.push(summarize(d.delivery).p99);
        if (r >= burstReps) {
          ctx.log(`desired rep ${r + 1}: single hub ${fmtMs(median(h.delivery))} / Socket.IO ${fmtMs(median(s.delivery))} / Socket.IO+PG ${fmtMs(median(d.delivery))}`);
          continue;
        }
        const bh = await burst(hub, burstN, concurrency, `b${r}-h`);
        const bs = await burst(sioPlain, burstN, concurrency, `b${r}-s`);
        const bd = await burst(sioDb, burstN, concurrency, `b${r}-d`);
        burstT.hub.push(bh.totalMs);
        burstT.sio.push(bs.totalMs);
        burstT.sioDb.push(bd.totalMs);
        burstP99.push(summarize(bh.latencies).p99);
        ctx.log(
          `desired rep ${r + 1}: single hub ${fmtMs(median(h.delivery))} / Socket.IO ${fmtMs(median(s.delivery))} / Socket.IO+PG ${fmtMs(median(d.delivery))}; burst ${burstN}: hub ${fmtMs(bh.totalMs)} / ${fmtMs(bs.totalMs)} / ${fmtMs(bd.totalMs)}`,
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
      return {
        name: 'desired',
        title: this.title,
        method: [
          `Single changes: ${singlesN} sequential PUTs per repetition, each a new deployment id; latency = PUT request started → its deployment.desired frame received by the operator (a raw ws client that acks every 100 frames). ${ctx.reps} repetitions.`,
          `Burst: ${fmtNum(burstN)} PUTs with ${concurrency} in flight; time = first PUT started → last frame received; ${burstReps} repetition(s).`,
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
            target: 'at least as fast as Socket.IO',
            met: hubMed.median <= sioMed.median,
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
            metric: `burst of ${fmtNum(burstN)} changes → all at operator`,
            unit: 'ms',
            hub: hubBurst,
            baselines: [
              { label: 'Socket.IO', value: sioBurst },
              { label: 'Socket.IO + Postgres write', value: sioDbBurst },
            ],
            compare: `${ratio(hubBurst.median / sioBurst.median)} Socket.IO, ${ratio(hubBurst.median / sioDbBurst.median)} Socket.IO+PG`,
            target: 'at least as fast as Socket.IO',
            met: hubBurst.median <= sioBurst.median,
          },
        ],
        evidence: [
          `Hub admin PUT response time (stored in Postgres, poke sent): median ${fmtMs(repeated(putMs).median)}; the poke leaves in parallel with the response and carries the change, so delivery ≈ the PUT's statement + the poke + stamping and sending; it often arrives before the response.`,
          `HTTP floor, a GET the server answers 404 without work: hub (a Worker route in workerd) ${fmtMs(repeated(floor.hub).median)}, Socket.IO's Node http server ${fmtMs(repeated(floor.sio).median)}: of the hub's ${fmtMs(hubMed.median)} against Socket.IO+PG's ${fmtMs(sioDbMed.median)}, ${fmtMs(repeated(floor.hub).median - repeated(floor.sio).median)} is the runtime's request entry before any hub code runs.`,
          `Hub burst: per-change latency p99 ${fmtMs(repeated(burstP99).median)}; throughput ≈ ${fmtNum((burstN / hubBurst.median) * 1000)} changes/s (Socket.IO ${fmtNum((burstN / sioBurst.median) * 1000)}, Socket.IO+PG ${fmtNum((burstN / sioDbBurst.median) * 1000)}).`,
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
          concurrency,
        },
      };
    } finally {
      await sio.stop();
    }
  },
};
