/** Helpers of the idle-fleet scenario: observing a process, opening idle sessions, baselines. */
import type { BenchCluster, BenchEnv } from './env';
import { fmtNum } from './format';
import { mapLimit, RawOperator, SDK_PING_MS, sleep } from './operator';
import { readCpuSeconds, readMem } from './proc';
import { median } from './stats';
import type { ScenarioContext } from './types';

export interface Observation {
  rssBeforeKiB: number;
  rssKiB: number;
  rssMinKiB: number;
  perConnKiB: number;
  cpuCores: number;
  wallS: number;
}

/** RSS every second over `ms` (median and minimum) and CPU over the same span. */
export async function observe(pid: number, beforeKiB: number, n: number, ms: number): Promise<Observation> {
  const c0 = readCpuSeconds(pid);
  const t0 = performance.now();
  const rss: number[] = [];
  while (performance.now() - t0 < ms) {
    rss.push(readMem(pid).rssKiB);
    await sleep(Math.min(1_000, Math.max(0, ms - (performance.now() - t0))));
  }
  const wallS = (performance.now() - t0) / 1000;
  const cpu = readCpuSeconds(pid) - c0;
  const m = median(rss);
  return { rssBeforeKiB: beforeKiB, rssKiB: m, rssMinKiB: Math.min(...rss), perConnKiB: (m - beforeKiB) / n, cpuCores: cpu / wallS, wallS };
}

export interface OpenStats {
  failures: number;
}

/** One session, retried until welcomed or past the deadline. Pings start at a random point of the first period. */
export async function openIdle(env: BenchEnv, c: BenchCluster, deadline: number, stats: OpenStats): Promise<RawOperator | null> {
  for (;;) {
    if (performance.now() > deadline) return null;
    try {
      const op = await RawOperator.connect(env.wsUrl, c.token, { firstPingMs: Math.random() * SDK_PING_MS });
      const end = op.next((f) => f.type === 'stream.end', 30_000);
      try {
        await op.hello({ cluster_id: c.name });
        await end;
      } catch (err) {
        op.terminate();
        throw err;
      }
      return op;
    } catch {
      stats.failures++;
      await sleep(250 + Math.random() * 1_000);
    }
  }
}

/** The hub isolate's JS heap (MiB used / allocated), when the inspector is attached (--profile). */
export async function jsHeap(ctx: ScenarioContext, collect = false): Promise<{ usedMiB: number; totalMiB: number } | null> {
  if (!ctx.inspector) return null;
  try {
    if (collect) await ctx.inspector.send('HeapProfiler.collectGarbage');
    const h = await ctx.inspector.send<{ usedSize: number; totalSize: number }>('Runtime.getHeapUsage');
    return { usedMiB: h.usedSize / 2 ** 20, totalMiB: h.totalSize / 2 ** 20 };
  } catch {
    return null;
  }
}

export const heapText = (h: { usedMiB: number; totalMiB: number } | null) => (h ? `${fmtNum(h.usedMiB)} of ${fmtNum(h.totalMiB)} MiB` : 'n/a');

export function addKinds(into: Record<string, number>, a: Record<string, number>, b: Record<string, number> | undefined): void {
  for (const [k, v] of Object.entries(a)) into[k] = (into[k] ?? 0) + v - (b?.[k] ?? 0);
}

/** A baseline server holding `n` idle connections: RSS and CPU. */
export async function baselineIdle(pid: number, connect: () => Promise<() => void>, n: number, ms: number): Promise<Observation> {
  const before = readMem(pid).rssKiB;
  const closers = await mapLimit(Array.from({ length: n }), 50, () => connect());
  await sleep(ms / 2);
  const o = await observe(pid, before, n, ms);
  for (const close of closers) close();
  return o;
}

