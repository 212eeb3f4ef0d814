/**
 * The session objects' own wake counters (`GET /admin/clusters/{id}/session/wakes`), and the
 * eviction delay of this machine's workerd measured with them. Reading a counter reaches the
 * object (and brings it back into memory if it was evicted: a construction) but is not counted
 * as a wake; callers record when they read, so the residency model can count the read as an event.
 */
import type { BenchCluster, BenchEnv } from './env';
import { mapLimit, RawOperator, sleep } from './operator';
import { estimateEvictionDelay, type EvictionDelay, type EvictionProbe } from './residency';
import { phaseCheckOffset } from '../../src/hub/session/clock';

export interface WakeReading {
  wakes: number;
  constructions: number;
  byKind: Record<string, number>;
  /** Epoch ms of the object's last wakes (at most 256), ascending. */
  recent: number[];
  /** Epoch ms when the request left (the object is reached a few ms later). */
  sentAt: number;
  /** Epoch ms when the answer arrived (the object's part is over). */
  at: number;
}

export async function readWakes(env: BenchEnv, clusterUid: string): Promise<WakeReading> {
  const sentAt = Date.now();
  const r = await env.admin('GET', `/clusters/${clusterUid}/session/wakes`);
  const at = Date.now();
  if (r.status !== 200) throw new Error(`wakes of ${clusterUid}: HTTP ${r.status} ${JSON.stringify(r.json)}`);
  const j = r.json as { wakes: number; constructions: number; by_kind: Record<string, number>; recent: number[] };
  return { wakes: j.wakes, constructions: j.constructions, byKind: j.by_kind, recent: [...j.recent].sort((a, b) => a - b), sentAt, at };
}

/** Every cluster's counters, `concurrency` reads at a time; null where a read failed. */
export async function readAllWakes(env: BenchEnv, clusters: readonly BenchCluster[], concurrency: number): Promise<(WakeReading | null)[]> {
  return mapLimit(clusters, concurrency, (c) => readWakes(env, c.uid).catch(() => null));
}

export interface EvictionMeasurement extends EvictionDelay {
  probes: EvictionProbe[];
  /** Probes thrown away because something else woke the object between the two reads. */
  disturbed: number;
}

/** After the upgrade, the object's clock fires once at the handshake deadline (10 s) even after a welcome. */
const HANDSHAKE_ALARM_MS = 10_000;
/** The spec's silence limit, at which the fleet scenario runs the hub. */
const IDLE_TIMEOUT_MS = 30_000;

/**
 * How long after its last event this workerd evicts an idle session object: open sessions that
 * ping like the fleet's (the runtime answers them), wait past the handshake deadline's alarm,
 * read each one's counter, leave it alone for one of `ladderMs`, read again: a higher
 * construction count means it was evicted meanwhile. Idle time = first answer received → second
 * request sent. A probe whose object was woken in between is discarded. The ladder must end
 * before the 30 s silence check (≤ 18 s). Sessions are closed at the end.
 */
export async function measureEvictionDelay(env: BenchEnv, ladderMs: readonly number[], perStep: number, pingMs: number): Promise<EvictionMeasurement> {
  const clusters = await env.createClusters(ladderMs.length * perStep, 'evict-probe');
  const opened = Date.now();
  const ops = await mapLimit(clusters, 8, async (c) => {
    const op = await RawOperator.connect(env.wsUrl, c.token, { firstPingMs: Math.random() * pingMs });
    const end = op.next((f) => f.type === 'stream.end');
    const welcome = await op.hello({ cluster_id: c.name });
    await end;
    // The session's one extra silence check (src/hub/session/clock.ts): the next deadline is at
    // least 20 s after it, time enough for the longest probe.
    const sessionId = String((welcome.payload as { session_id: string }).session_id);
    return { op, quietFrom: Date.now() + phaseCheckOffset(sessionId, IDLE_TIMEOUT_MS) + 500 };
  });
  await sleep(Math.max(500, opened + HANDSHAKE_ALARM_MS + 1_000 - Date.now()));
  const results = await Promise.all(
    clusters.map(async (c, i) => {
      const idle = ladderMs[i % ladderMs.length] as number;
      await sleep(Math.max(0, (ops[i] as { quietFrom: number }).quietFrom - Date.now()));
      const first = await readWakes(env, c.uid);
      await sleep(idle - (Date.now() - first.at));
      const second = await readWakes(env, c.uid);
      if (second.wakes !== first.wakes) return null;
      return { idleMs: second.sentAt - first.at, evicted: second.constructions > first.constructions };
    }),
  );
  for (const { op } of ops) op.close();
  const probes = results.filter((p): p is EvictionProbe => p !== null);
  return { ...estimateEvictionDelay(probes), probes, disturbed: results.length - probes.length };
}
