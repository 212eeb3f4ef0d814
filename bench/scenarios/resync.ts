/**
 * Full resync, end to end: a fresh session for a cluster with 10,000 desired deployments (the hub
 * streams them down) whose operator streams a snapshot of 10,000 GPUs and 1,000 nodes up, with
 * prune of the rows the snapshot no longer names. Peak resident memory of workerd meanwhile.
 * Baseline: Postgres alone doing the same database work from Node (the hub's own statements:
 * the ingest batches as the hub cuts them, with the prune, and the snapshot page reads).
 */
import { buildFrame, newId, readFrame } from '../../src/protocol';
import { fetchDesiredSnapshotPage } from '../../src/hub/db/desired';
import { applyIngestBatch } from '../../src/hub/db/ingest';
import { buildBatch, type InboundItem } from '../../src/hub/session/ingest-batch';
import type { OpResync } from '../../src/hub/session/store';
import { claimedFence, sqlOf } from '../baselines/postgres';
import type { BenchCluster, BenchEnv } from '../lib/env';
import { fmtMs, fmtNum, ratio } from '../lib/format';
import { describeHubLog, takeHubLogCounts } from '../lib/hublog';
import { RawOperator, sleep, withTimeout } from '../lib/operator';
import { device, node } from '../lib/payloads';
import { readCpuSeconds, readMem, resetPeak } from '../lib/proc';
import { median, repeated } from '../lib/stats';
import type { Scenario, ScenarioContext, ScenarioResult } from '../lib/types';

const TARGET_MS = 3_000;

interface Sizes {
  deployments: number;
  gpus: number;
  nodes: number;
  staleGpus: number;
  staleNodes: number;
}

/** The operator's snapshot stream: resync.begin, nodes, GPUs, stream.end. */
function snapshotFrames(s: Sizes): { texts: string[]; lastSeq: number } {
  const beginId = newId();
  const texts: string[] = [];
  let seq = 1;
  texts.push(buildFrame({ type: 'resync.begin', payload: { scope: ['node', 'device'] }, seq: seq++, ack: 0, id: beginId }));
  for (let i = 0; i < s.nodes; i++) texts.push(buildFrame({ type: 'node.observed', payload: node(i), seq: seq++, ack: 0, reply_to: beginId }));
  for (let i = 0; i < s.gpus; i++) {
    texts.push(buildFrame({ type: 'device.observed', payload: device(i, s.nodes), seq: seq++, ack: 0, reply_to: beginId }));
  }
  texts.push(buildFrame({ type: 'stream.end', payload: { complete: true, count: s.nodes + s.gpus }, seq: seq, ack: 0, reply_to: beginId }));
  return { texts, lastSeq: seq };
}

/** Rows a previous session left that the snapshot no longer names (the prune's work). */
async function seedStale(env: BenchEnv, clusterUid: string, s: Sizes): Promise<void> {
  await env.sql(
    `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
     select $1, 'stale-node-' || g, 'stale-node-' || g, true, true, '{}', '[]', 8, 1000, 1000, 'old-session', g from generate_series(1, $2) g`,
    [clusterUid, s.staleNodes],
  );
  await env.sql(
    `insert into devices (cluster_uid, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq)
     select $1, 'stale-gpu-' || g, 'stale-node-1', 'nvidia', 'A100', 81920, 'healthy', '550', 'old-session', g from generate_series(1, $2) g`,
    [clusterUid, s.staleGpus],
  );
}

interface HubRun {
  totalMs: number;
  welcomeMs: number;
  downMs: number;
  upMs: number;
  peakRssKiB: number;
  rssBeforeKiB: number;
  workerdCpuS: number;
  rows: { nodes: number; devices: number };
}

async function hubResyncOnce(ctx: ScenarioContext, s: Sizes, tag: string): Promise<HubRun> {
  const { env } = ctx;
  const [c] = await env.createClusters(1, tag);
  const cluster = c as BenchCluster;
  await env.seedDesired(cluster.uid, s.deployments);
  await seedStale(env, cluster.uid, s);
  const { texts, lastSeq } = snapshotFrames(s);
  await sleep(500);

  const pid = env.workerdPid;
  const rssBefore = readMem(pid).rssKiB;
  resetPeak(pid);
  const cpu0 = readCpuSeconds(pid);
  const t0 = performance.now();
  // Acks by hand, every 1,000 frames and at the stream's end (the figures before were taken so).
  const op = await RawOperator.connect(env.wsUrl, cluster.token, { autoAckMs: false });
  let welcomeAt = 0;
  let downAt: number | null = null;
  let upAt: number | null = null;
  let received = 0;
  const done = new Promise<void>((resolve, reject) => {
    op.onFrame((f, at) => {
      if (f.type === 'welcome') {
        welcomeAt = at;
        // Stream the snapshot up at once, in chunks so incoming frames are still read.
        void (async () => {
          const socket = (op.ws as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
          for (let i = 0; i < texts.length; i += 1_000) {
            socket?.cork();
            for (const t of texts.slice(i, i + 1_000)) op.sendRaw(t);
            socket?.uncork();
            await new Promise((r) => setImmediate(r));
          }
        })();
        return;
      }
      if (f.seq !== null) {
        received++;
        if (received % 1_000 === 0) op.sendAck();
      }
      if (f.type === 'stream.end' && downAt === null) {
        downAt = at;
        op.sendAck();
      }
      if (upAt === null && (f.ack ?? 0) >= lastSeq) upAt = at;
      if (downAt !== null && upAt !== null) resolve();
    });
    op.onClose((code) => reject(new Error(`closed ${code} during resync`)));
  });
  op.nextSeq = lastSeq + 1;
  op.sendFrame('hello', { cluster_id: cluster.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false }, { ack: null });
  await withTimeout(done, 120_000, 'resync');
  const end = performance.now();
  const mem = readMem(pid);
  const cpu = readCpuSeconds(pid) - cpu0;
  op.close();
  const [counts] = await env.sql<{ nodes: string; devices: string }>(
    `select (select count(*) from nodes where cluster_uid = $1) as nodes, (select count(*) from devices where cluster_uid = $1) as devices`,
    [cluster.uid],
  );
  return {
    totalMs: end - t0,
    welcomeMs: welcomeAt - t0,
    downMs: (downAt ?? Number.NaN) - t0,
    upMs: (upAt ?? Number.NaN) - t0,
    peakRssKiB: mem.hwmKiB,
    rssBeforeKiB: rssBefore,
    workerdCpuS: cpu,
    rows: { nodes: Number(counts?.nodes), devices: Number(counts?.devices) },
  };
}

/** The same database work from Node: the hub's ingest statements (2,000-frame batches, prune last) and its snapshot reads. */
async function postgresOnly(env: BenchEnv, s: Sizes, batchFrames: number): Promise<{ ingestMs: number; readMs: number; statements: number }> {
  const client = await env.newClient();
  try {
    const fence = await claimedFence(env, client);
    await env.seedDesired(fence.clusterUid, s.deployments);
    await seedStale(env, fence.clusterUid, s);
    const sql = sqlOf(client);
    const { texts } = snapshotFrames(s);
    const items: InboundItem[] = texts.map((t) => {
      const f = readFrame(t);
      if (f.kind !== 'message') throw new Error('bad frame');
      const e = f.envelope;
      return { seq: e.seq as number, id: e.id, replyTo: e.reply_to, type: e.type, arrivedAt: 0, kind: 'message', message: f.message };
    });
    let resyncs: Record<string, OpResync> = {};
    let statements = 0;
    const t0 = performance.now();
    for (let i = 0; i < items.length; i += batchFrames) {
      const built = buildBatch(items.slice(i, i + batchFrames), resyncs);
      const r = await applyIngestBatch(sql, fence, built.batch);
      if (!r.fenced) throw new Error('fence lost');
      resyncs = built.resyncs;
      statements++;
    }
    const ingestMs = performance.now() - t0;
    const r0 = performance.now();
    let after: string | null = null;
    for (;;) {
      const got = await fetchDesiredSnapshotPage(sql, fence, after, 1_000, 4 << 20);
      if (!got) throw new Error('fence lost');
      const { rows: page, more } = got;
      statements++;
      if (!more) break;
      after = page[page.length - 1]?.payload.deployment_id ?? null;
    }
    return { ingestMs, readMs: performance.now() - r0, statements };
  } finally {
    await client.end().catch(() => undefined);
  }
}

export const resync: Scenario = {
  name: 'resync',
  freshHub: true,
  budgetS: 45,
  title: 'Full resync: 10,000 deployments down, 10,000 GPUs + 1,000 nodes up, with prune',
  async run(ctx: ScenarioContext): Promise<ScenarioResult> {
    const s: Sizes = ctx.quick
      ? { deployments: 1_000, gpus: 1_000, nodes: 100, staleGpus: 50, staleNodes: 10 }
      : { deployments: 10_000, gpus: 10_000, nodes: 1_000, staleGpus: 500, staleNodes: 50 };
    const small: Sizes = { deployments: 100, gpus: 100, nodes: 10, staleGpus: 5, staleNodes: 1 };
    await hubResyncOnce(ctx, small, 'resync-warm');
    takeHubLogCounts();
    const runs: HubRun[] = [];
    const pg: { ingestMs: number; readMs: number; statements: number }[] = [];
    for (let r = 0; r < ctx.reps; r++) {
        if (r > 0 && ctx.overBudget()) break;
      const h = await hubResyncOnce(ctx, s, `resync${r}`);
      runs.push(h);
      const p = await postgresOnly(ctx.env, s, Number(ctx.env.vars.INGEST_BATCH_FRAMES ?? 2_000));
      pg.push(p);
      const pruneOk = h.rows.nodes === s.nodes && h.rows.devices === s.gpus;
      ctx.log(
        `resync rep ${r + 1}: end to end ${fmtMs(h.totalMs)} (welcome ${fmtMs(h.welcomeMs)}, down ${fmtMs(h.downMs)}, up applied+pruned ${fmtMs(h.upMs)}); workerd peak RSS ${fmtNum(h.peakRssKiB / 1024)} MiB (before ${fmtNum(h.rssBeforeKiB / 1024)}); rows after prune ${h.rows.nodes} nodes / ${h.rows.devices} GPUs ${pruneOk ? 'OK' : 'MISMATCH'}; Postgres alone ${fmtMs(p.ingestMs + p.readMs)}`,
      );
      if (!pruneOk) throw new Error(`prune left ${h.rows.nodes} nodes and ${h.rows.devices} GPUs, expected ${s.nodes} and ${s.gpus}`);
    }
    const hubLog = describeHubLog(takeHubLogCounts());
    const total = repeated(runs.map((r) => r.totalMs));
    const pgTotal = repeated(pg.map((p) => p.ingestMs + p.readMs));
    const upFrames = s.nodes + s.gpus + 2;
    return {
      name: 'resync',
      title: this.title,
      method: [
        `Per repetition a new cluster with ${fmtNum(s.deployments)} desired deployments and ${s.staleGpus} GPUs + ${s.staleNodes} nodes left by an earlier session (to be pruned). Clock starts as the operator's WebSocket starts opening; on the welcome (full_resync) the operator streams resync.begin {scope: [node, device]}, ${fmtNum(s.nodes)} node.observed, ${fmtNum(s.gpus)} device.observed and stream.end {complete, count} (${fmtNum(upFrames)} frames) while reading the hub's resync.begin, ${fmtNum(s.deployments)} deployment.desired and stream.end, acking every 1,000.`,
        'Done = the hub\'s stream.end received AND the hub\'s ack covering the operator\'s stream.end (all applied and pruned in Postgres). Row counts are checked after each run (the stale rows must be gone).',
        'Peak memory: VmHWM of the workerd process running the hub, reset (`/proc/PID/clear_refs` = 5) just before each run.',
        'Runs on a freshly started hub (new workerd process, empty Durable Object storage, same database): memory starts from a clean process.',
        `Postgres alone: the same frames cut into the hub's batches and applied with the hub's own statement from Node (driver + proxy), then the ${Math.ceil(s.deployments / 1_000)} snapshot page reads. ${ctx.reps} repetitions.`,
      ],
      figures: [
        {
          metric: `full resync end to end (${fmtNum(s.deployments)} down, ${fmtNum(s.gpus)} GPUs + ${fmtNum(s.nodes)} nodes up, prune)`,
          unit: 'ms',
          hub: total,
          baselines: [{ label: 'Postgres alone, same statements', value: pgTotal }],
          compare: `database work ≈ ${ratio(pgTotal.median / total.median)} of the wall time`,
          target: `≤ ${fmtNum(TARGET_MS)} ms`,
          met: total.median <= TARGET_MS,
        },
        { metric: 'hub→operator: all deployments received', unit: 'ms', hub: repeated(runs.map((r) => r.downMs)) },
        { metric: 'operator→hub: snapshot applied and pruned (acked)', unit: 'ms', hub: repeated(runs.map((r) => r.upMs)), baselines: [{ label: 'Postgres alone, ingest statements', value: repeated(pg.map((p) => p.ingestMs)) }] },
        { metric: 'workerd peak RSS during the resync', unit: 'MiB', hub: repeated(runs.map((r) => r.peakRssKiB / 1024)) },
      ],
      evidence: [
        `workerd RSS just before each run: ${fmtNum(median(runs.map((r) => r.rssBeforeKiB / 1024)))} MiB; growth to peak ${fmtNum(median(runs.map((r) => (r.peakRssKiB - r.rssBeforeKiB) / 1024)))} MiB.`,
        `workerd CPU per resync: ${fmtNum(median(runs.map((r) => r.workerdCpuS)))} s (${fmtNum(((median(runs.map((r) => r.workerdCpuS)) * 1e6) / (upFrames + s.deployments)))} µs per frame in either direction).`,
        `Postgres alone: ${pg[0]?.statements ?? 0} statements; ingest ${fmtMs(median(pg.map((p) => p.ingestMs)))}, snapshot reads ${fmtMs(median(pg.map((p) => p.readMs)))}.`,
        `Welcome after ${fmtMs(median(runs.map((r) => r.welcomeMs)))}.`,
        `Hub log: ${hubLog}.`,
      ],
      data: {
        totalMs: total.median,
        downMs: repeated(runs.map((r) => r.downMs)).median,
        upMs: repeated(runs.map((r) => r.upMs)).median,
        welcomeMs: repeated(runs.map((r) => r.welcomeMs)).median,
        pgAloneMs: pgTotal.median,
        pgIngestMs: repeated(pg.map((p) => p.ingestMs)).median,
        pgReadMs: repeated(pg.map((p) => p.readMs)).median,
        pgStatements: pg[0]?.statements ?? 0,
        peakRssMiB: repeated(runs.map((r) => r.peakRssKiB / 1024)).median,
        rssBeforeMiB: repeated(runs.map((r) => r.rssBeforeKiB / 1024)).median,
        workerdCpuS: repeated(runs.map((r) => r.workerdCpuS)).median,
        deployments: s.deployments,
        upFrames,
      },
    };
  },
};
