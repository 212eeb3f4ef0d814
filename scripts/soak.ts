/**
 * `npm run soak [-- --minutes 3 --seed 1 --clusters 3]`: a bounded soak of the whole link.
 *
 * Starts the hub in real workerd on a real Postgres (DATABASE_URL, else 127.0.0.1:5432 when it
 * answers, else embedded PGlite; a database of its own, dropped at the end), runs K simulated
 * clusters (the SDK and the cluster model, each behind its own fault-injecting link proxy) under
 * a steady stream of observed and desired change, and loops:
 *
 *   storm: random faults from a seeded RNG (link cuts, cuts after n frames, blackholes past the
 *          silence limit, refused connects, a slow link, hub restarts on the same storage and on
 *          fresh storage, Postgres cut at the network, displacement by an overlapping operator,
 *          operator crashes and graceful restarts) while operations are started now and then;
 *   quiet: every fault healed, change stopped; each cluster must converge (bounded) and hold
 *          the invariants of test/e2e/support/converge.ts (nothing acked lost, nothing pruned
 *          wrongly, desired bounds exactly as stored, operations concluded once).
 *
 * Prints a summary and writes it to bench/SOAK.md (`--out` to change). Exit code 1 when any
 * invariant was violated or a cluster did not converge. Not part of `npm test`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MemoryCursorStore } from '../src/operator/cursor-store';
import { jsonLogger, silentLogger } from '../src/operator/logger';
import { Churn } from '../test/e2e/support/churn';
import { checkInvariants, linkDetail, waitConverged, type ConvergeTarget, type Query } from '../test/e2e/support/converge';
import { snapshotSource, type SourceSnapshot } from './lib/source-snapshot';
import { launchHub, type LaunchedHub } from '../test/e2e/support/launch';
import { LinkProxy } from '../test/e2e/support/link-proxy';
import { Admin, desiredBody, openQuery, type Registered } from '../test/e2e/support/plane';
import { SeededRandom } from '../test/e2e/support/rng';
import { SimCluster, type ClientTuning, type OperatorProcess, type Storage } from '../test/e2e/support/sim-cluster';
import { pickDatabaseUrlForTests, startDevStack, type DevStack } from './lib/dev-stack';
import { pgTarget } from './lib/pg-node';
import { startPgWsProxy, type PgWsProxy } from './lib/pg-ws-proxy';

// Offline machines: no metrics, and no fetch of the Request.cf placeholder (a warning per start).
process.env.WRANGLER_SEND_METRICS ??= 'false';
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= 'false';

const USAGE = `usage: npm run soak -- [--minutes M] [--seed S] [--clusters K] [--out FILE] [--log-level L]
  --minutes M     how long to loop faults (default 3)
  --seed S        the RNG seed; the same seed replays the same choices (default 1)
  --clusters K    simulated clusters (default 3)
  --out FILE      where to write the figures (default bench/SOAK.md; "-" for none)
  --log-level L   SDK log lines on stderr: debug | info | warn | error (default: none)`;

/** The spec's timers, fast (as in the e2e suites): faults cost seconds, not minutes. */
const HUB_VARS: Record<string, string> = {
  HANDSHAKE_TIMEOUT_MS: '1500',
  PING_INTERVAL_MS: '1000',
  IDLE_TIMEOUT_MS: '3000',
  POLL_INTERVAL_MS: '500',
  HOLE_TIMEOUT_MS: '2500',
  RETENTION_MS: '120000',
  PG_QUERY_TIMEOUT_MS: '1500',
};

const CLIENT: ClientTuning = {
  backoff: { baseMs: 200, capMs: 2_000 },
  ackDelayMs: 20,
  statsIntervalMs: 500,
  stableAfterMs: 3_000,
  drainTimeoutMs: 3_000,
};

const FAULTS = [
  'link-cut',
  'cut-after-frames',
  'blackhole',
  'refuse-connects',
  'slow-link',
  'hub-restart-same-storage',
  'hub-restart-fresh-storage',
  'postgres-cut',
  'displacement',
  'operator-crash',
  'operator-graceful-restart',
] as const;
type Fault = (typeof FAULTS)[number];

/** Relative weights: network faults are the common case, restarts the rarer one. */
const WEIGHTS: Record<Fault, number> = {
  'link-cut': 4,
  'cut-after-frames': 3,
  blackhole: 2,
  'refuse-connects': 2,
  'slow-link': 2,
  'hub-restart-same-storage': 1,
  'hub-restart-fresh-storage': 1,
  'postgres-cut': 2,
  displacement: 1,
  'operator-crash': 2,
  'operator-graceful-restart': 1,
};

interface Member {
  reg: Registered;
  sim: SimCluster;
  proxy: LinkProxy;
  storage: Storage;
  storageKind: Storage['kind'];
  churn: Churn;
  /** An operator lifecycle fault is in progress (crash awaiting restart, displacement). */
  busy: boolean;
}

/**
 * A database of this run's own: not named by the seed, so a run killed before its cleanup does
 * not stop the next run of that seed; the seeded generator still draws for it, so that a seed
 * injects the same faults as before.
 */
function soakDatabaseName(rng: SeededRandom): string {
  rng.hex(8);
  return `wingsmith_soak_${randomBytes(4).toString('hex')}`;
}

interface Violation {
  cycle: number;
  cluster: string;
  text: string;
  /** Where the link stood (a convergence that did not come). */
  detail?: string[];
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string' },
      seed: { type: 'string' },
      clusters: { type: 'string' },
      out: { type: 'string' },
      'log-level': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const minutes = Number(values.minutes ?? '3');
  const seed = Number(values.seed ?? '1');
  const k = Number(values.clusters ?? '3');
  if (!(minutes > 0) || !Number.isInteger(seed) || !(Number.isInteger(k) && k >= 1 && k <= 20)) {
    console.error(`soak: bad arguments\n\n${USAGE}`);
    return 2;
  }
  const out = values.out ?? fileURLToPath(new URL('../bench/SOAK.md', import.meta.url));
  const level = values['log-level'];
  const logger = level === 'debug' || level === 'info' || level === 'warn' || level === 'error' ? jsonLogger({ level }) : silentLogger;
  const rng = new SeededRandom(seed);
  const started = Date.now();
  const command = `npm run soak -- --minutes ${minutes} --seed ${seed} --clusters ${k}`;

  let unhandled = 0;
  process.on('unhandledRejection', (err) => {
    unhandled++;
    console.error('soak: unhandled rejection:', err);
  });

  // --- the database, the hub, the clusters --------------------------------------------------
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'wingsmith-soak-pg-'));
  const serverUrl = await pickDatabaseUrlForTests();
  let stack: DevStack | null = null;
  let pgProxy: PgWsProxy | null = null;
  let hub: LaunchedHub | null = null;
  let source: SourceSnapshot | null = null;
  const persistDirs: string[] = [];
  const stateDirs: string[] = [];
  const members: Member[] = [];
  let q: ReturnType<typeof openQuery> | null = null;
  try {
    stack = await startDevStack(
      serverUrl
        ? { databaseUrl: serverUrl, dataDir, createDatabase: soakDatabaseName(rng), reapStaleDatabases: 'wingsmith_soak_' }
        : { dataDir },
    );
    const databaseKind = stack.embedded ? 'embedded PGlite' : `PostgreSQL at ${new URL(stack.databaseUrl).host}`;
    console.log(`soak: ${databaseKind}; seed ${seed}; ${k} clusters; ${minutes} min of faults`);
    const target = pgTarget(stack.databaseUrl);
    // The hub reaches Postgres through a proxy of our own, so the soak can cut it; the checker
    // reads through the stack's proxy, which stays up.
    pgProxy = await startPgWsProxy({ target });
    const pgPort = pgProxy.port;
    const pgDown = async () => {
      await pgProxy?.close();
      pgProxy = null;
    };
    const pgUp = async () => {
      if (!pgProxy) pgProxy = await startPgWsProxy({ target, port: pgPort });
    };
    const vars = { ...HUB_VARS, DATABASE_URL: stack.databaseUrl, PG_WS_PROXY: `127.0.0.1:${pgPort}`, ADMIN_TOKEN: `soak-${rng.hex(16)}` };
    const newPersistDir = async () => {
      const d = await mkdtemp(path.join(os.tmpdir(), 'wingsmith-soak-do-'));
      persistDirs.push(d);
      return d;
    };
    // Every restart starts the hub from this copy: edits to src/ during the run reach no restart.
    source = await snapshotSource(null);
    const configPath = path.join(source.dir, 'wrangler.toml');
    let persistDir = await newPersistDir();
    hub = await launchHub({ vars, persistDir, configPath });
    const admin = new Admin(hub.url, vars.ADMIN_TOKEN);
    q = openQuery(stack.databaseUrl, stack.pgWsProxy);
    const query: Query = q.query;

    const run = rng.hex(4);
    const storageKinds: Storage['kind'][] = ['files', 'memory', 'none'];
    const newStorage = async (kind: Storage['kind']): Promise<Storage> => {
      if (kind === 'files') {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'wingsmith-soak-op-'));
        stateDirs.push(dir);
        return { kind: 'files', dir };
      }
      return kind === 'memory' ? { kind: 'memory', cursorStore: new MemoryCursorStore() } : { kind: 'none' };
    };
    for (let i = 1; i <= k; i++) {
      const reg = await admin.register(`soak-${run}-${i}`);
      const proxy = await LinkProxy.start({ upstream: hub.wsUrl });
      const sim = new SimCluster({ name: reg.name, shape: { nodes: 3, gpusPerNode: 8 }, logger });
      const storageKind = storageKinds[(i - 1) % storageKinds.length] as Storage['kind'];
      const storage = await newStorage(storageKind);
      const churn = new Churn(new SeededRandom(seed * 1000 + i), sim, admin, {
        observedEveryMs: 120,
        desiredEveryMs: 900,
        deployments: ['d1', 'd2', 'd3'],
      });
      members.push({ reg, sim, proxy, storage, storageKind, churn, busy: false });
      await admin.putDesired(reg.name, 'd1', desiredBody({ min_replicas: 1, max_replicas: 2 }));
    }
    const tuningFor = (): ClientTuning => ({ ...CLIENT, random: rng.fn() });
    const startOperator = (m: Member, overlap = false) =>
      m.sim.startOperator({ hubUrl: m.proxy.url, token: m.reg.token, storage: m.storage, tuning: tuningFor(), overlap });
    for (const m of members) await startOperator(m);

    /** Operations the admin API accepted, by cluster uid: each must be stored and concluded. */
    const accepted = new Map<string, Set<string>>();
    const targetOf = (m: Member): ConvergeTarget => ({ uid: m.reg.uid, cluster: m.sim, expectFullPlacement: false, operationsAccepted: accepted.get(m.reg.uid) ?? new Set() });

    // --- figures ----------------------------------------------------------------------------
    const faults = Object.fromEntries(FAULTS.map((f) => [f, 0])) as Record<Fault, number>;
    const violations: Violation[] = [];
    const convergeTimes: number[] = [];
    let operationsStarted = 0;
    let cycles = 0;

    // --- faults -----------------------------------------------------------------------------
    const heals = new Map<number, { timer: NodeJS.Timeout; heal: () => Promise<void> | void }>();
    let nextHeal = 1;
    const later = (ms: number, heal: () => Promise<void> | void) => {
      const id = nextHeal++;
      const timer = setTimeout(() => {
        heals.delete(id);
        void Promise.resolve(heal()).catch((err: unknown) => console.error('soak: heal failed:', err));
      }, ms);
      heals.set(id, { timer, heal });
    };
    const healAll = async () => {
      const pending = [...heals.values()];
      heals.clear();
      for (const h of pending) clearTimeout(h.timer);
      for (const h of pending) await h.heal();
      for (const m of members) {
        m.proxy.disarm();
        m.proxy.blackhole(false);
        m.proxy.delay(0);
        m.proxy.accept();
      }
      await pgUp();
    };
    const restartHub = async (keepState: boolean) => {
      await hub?.stop();
      hub = null;
      if (!keepState) persistDir = await newPersistDir();
      hub = await launchHub({ vars, persistDir, configPath });
      admin.baseUrl = hub.url;
      for (const m of members) m.proxy.setUpstream(hub.wsUrl);
    };
    const restartAfterCrash = async (m: Member) => {
      await startOperator(m);
      m.busy = false;
    };

    const pickFault = (): Fault => {
      const total = FAULTS.reduce((s, f) => s + WEIGHTS[f], 0);
      let x = rng.next() * total;
      for (const f of FAULTS) {
        x -= WEIGHTS[f];
        if (x < 0) return f;
      }
      return 'link-cut';
    };

    const inject = async (fault: Fault): Promise<boolean> => {
      const m = rng.pick(members);
      switch (fault) {
        case 'link-cut':
          m.proxy.cutAll();
          return true;
        case 'cut-after-frames':
          void m.proxy.cutAfter(rng.int(1, 40), rng.pick(['up', 'down'] as const));
          return true;
        case 'blackhole': {
          // Sometimes past the 3 s silence limit, sometimes within it; frames dropped (the
          // receiver then sees a gap) or held (a TCP partition that heals).
          m.proxy.blackhole(true, 'both', rng.pick(['drop', 'hold'] as const));
          later(rng.int(800, 5_000), () => m.proxy.blackhole(false));
          return true;
        }
        case 'refuse-connects':
          m.proxy.cutAll();
          m.proxy.refuse(rng.int(500, 3_000), rng.pick(['reset', 'http503'] as const));
          return true;
        case 'slow-link':
          m.proxy.delay(rng.int(10, 120));
          later(rng.int(1_000, 4_000), () => m.proxy.delay(0));
          return true;
        case 'hub-restart-same-storage':
          await restartHub(true);
          return true;
        case 'hub-restart-fresh-storage':
          await restartHub(false);
          return true;
        case 'postgres-cut':
          if (!pgProxy) return false;
          await pgDown();
          later(rng.int(500, 4_000), pgUp);
          return true;
        case 'displacement': {
          const old = m.sim.operator;
          if (m.busy || !old || m.sim.running.length !== 1) return false;
          m.busy = true;
          // A second replica of the operator (its own storage) comes up; the old one is
          // displaced (4409) and then terminated, as a rolling update would.
          m.storage = await newStorage(m.storageKind);
          const finish = () => {
            if (old.stopped) return;
            void m.sim.stopProcess(old, { graceful: false }).finally(() => {
              m.busy = false;
            });
          };
          old.client.on('closed', (c) => {
            if (c.code === 4409) finish();
          });
          await startOperator(m, true);
          later(10_000, finish);
          return true;
        }
        case 'operator-crash': {
          if (m.busy || !m.sim.operator || m.sim.running.length !== 1) return false;
          m.busy = true;
          await m.sim.crashOperator(() => m.proxy.cutAll());
          later(rng.int(300, 2_500), () => restartAfterCrash(m));
          return true;
        }
        case 'operator-graceful-restart': {
          if (m.busy || !m.sim.operator || m.sim.running.length !== 1) return false;
          m.busy = true;
          await m.sim.stopOperator({ graceful: true, timeoutMs: 2_000 });
          await startOperator(m);
          m.busy = false;
          return true;
        }
      }
    };

    const startOperation = async () => {
      const m = rng.pick(members);
      const nodes = m.sim.model.snapshot().nodes;
      if (nodes.length === 0) return;
      const n = rng.pick(nodes);
      const kind = rng.pick(['node.cordon', 'node.uncordon', 'node.drain', 'model.prefetch'] as const);
      try {
        const id = await admin.startOperation(m.reg.name, kind, kind === 'model.prefetch' ? 'meta-llama/Llama-3.1-8B-Instruct' : n.node_id, 120);
        operationsStarted++;
        const ids = accepted.get(m.reg.uid) ?? new Set<string>();
        ids.add(id);
        accepted.set(m.reg.uid, ids);
      } catch {
        // The hub may be restarting: the next one will do.
      }
    };

    // Everything up before the first storm.
    for (const m of members) {
      const w = await waitConverged(query, targetOf(m), { timeoutMs: 60_000 });
      if (!w.ok) throw new Error(`${m.reg.name} did not converge before the first storm: ${w.pending.slice(0, 5).join('; ')}`);
    }

    // --- the loop -------------------------------------------------------------------------------
    const deadline = Date.now() + minutes * 60_000;
    while (Date.now() < deadline) {
      cycles++;
      const stormMs = rng.int(8_000, 14_000);
      const stormEnd = Math.min(deadline, Date.now() + stormMs);
      for (const m of members) m.churn.start();
      const injected: string[] = [];
      while (Date.now() < stormEnd) {
        await sleep(rng.int(300, 2_000));
        if (rng.chance(0.15)) await startOperation();
        const f = pickFault();
        try {
          if (await inject(f)) {
            faults[f]++;
            injected.push(f);
          }
        } catch (err) {
          console.error(`soak: injecting ${f} failed:`, err);
        }
      }
      // Quiet: no more change, every fault healed, then each cluster must converge.
      await Promise.all(members.map((m) => m.churn.stop()));
      await healAll();
      const quietAt = Date.now();
      let worst = 0;
      for (const m of members) {
        const target = targetOf(m);
        const w = await waitConverged(query, target, { timeoutMs: 60_000 });
        const took = Date.now() - quietAt;
        if (!w.ok) {
          // Where the link stood, for a wedge that may not come back with the same seed.
          const detail = linkDetail(m.sim);
          violations.push({ cycle: cycles, cluster: m.reg.name, text: `not converged within 60 s: ${w.pending.slice(0, 5).join('; ')}`, detail });
          continue;
        }
        convergeTimes.push(took);
        worst = Math.max(worst, took);
        for (const v of checkInvariants(w.plane, target)) violations.push({ cycle: cycles, cluster: m.reg.name, text: v });
      }
      console.log(
        `cycle ${cycles}: ${injected.length} faults (${summarize(injected)}); converged in ≤ ${(worst / 1000).toFixed(1)} s; violations so far ${violations.length}`,
      );
      for (const v of violations.filter((x) => x.cycle === cycles)) {
        console.log(`  VIOLATION ${v.cluster}: ${v.text}`);
        for (const line of v.detail ?? []) console.log(`    ${line}`);
      }
    }

    // --- figures --------------------------------------------------------------------------------
    let framesSent = 0;
    let framesAcked = 0;
    let hubFrames = 0;
    let eventsSent = 0;
    let freshSessions = 0;
    let resumes = 0;
    let connections = 0;
    let observedResyncs = 0;
    let droppedEvents = 0;
    let eventsEmitted = 0;
    let lossyHellos = 0;
    for (const m of members) {
      for (const s of m.sim.tap.sessions.values()) {
        framesSent += s.sent.size;
        for (const seq of s.sent.keys()) if (seq <= s.acked) framesAcked++;
        hubFrames += s.received.length;
      }
      eventsSent += m.sim.tap.events().sent.size;
      for (const w of m.sim.tap.welcomes) {
        if (w.full_resync === true) freshSessions++;
        else resumes++;
      }
      lossyHellos += m.sim.tap.hellos.filter((h) => h.lossy === true).length;
      connections += m.sim.tap.links.length;
      for (const p of m.sim.processes as OperatorProcess[]) {
        observedResyncs += p.client.stats.resyncsSent;
        droppedEvents += p.client.stats.queue.droppedEvents;
      }
      eventsEmitted += m.sim.eventsEmitted;
    }
    const uids = members.map((m) => m.reg.uid);
    const [stored] = await query<{ events: string; operations: string; concluded: string }>(
      `select (select count(*) from events where cluster_uid = any($1)) as events,
              (select count(*) from operations where cluster_uid = any($1)) as operations,
              (select count(*) from operations where cluster_uid = any($1) and state in ('succeeded', 'failed', 'cancelled')) as concluded`,
      [uids],
    );
    const [pgVersion] = await query<{ version: string }>('select version()');
    const sorted = [...convergeTimes].sort((a, b) => a - b);
    const pct = (p: number) => (sorted.length === 0 ? 0 : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number));
    const proxyCuts = members.reduce((s, m) => s + m.proxy.stats.cuts, 0);
    const proxyRefused = members.reduce((s, m) => s + m.proxy.stats.refused, 0);
    const elapsed = Date.now() - started;

    const figures: [string, string][] = [
      ['cycles (storm + quiet check)', String(cycles)],
      ['faults injected', String(Object.values(faults).reduce((a, b) => a + b, 0))],
      ['operator → hub sequenced frames sent (distinct session, seq)', String(framesSent)],
      ['… of which acknowledged by the hub', String(framesAcked)],
      ['hub → operator sequenced frames received (replays included)', String(hubFrames)],
      ['connections (each dial)', String(connections)],
      ['sessions resumed / fresh (full resync)', `${resumes} / ${freshSessions}`],
      ['hellos that said lossy', String(lossyHellos)],
      ['observed snapshots streamed by operators', String(observedResyncs)],
      ['events emitted / sent / stored / dropped and counted', `${eventsEmitted} / ${eventsSent} / ${stored?.events ?? '?'} / ${droppedEvents}`],
      ['operations started / concluded', `${operationsStarted} / ${stored?.concluded ?? '?'} (of ${stored?.operations ?? '?'} stored)`],
      ['link proxy: connections cut / connects refused', `${proxyCuts} / ${proxyRefused}`],
      ['convergence after a storm: median / p90 / max', `${(pct(50) / 1000).toFixed(1)} s / ${(pct(90) / 1000).toFixed(1)} s / ${((sorted[sorted.length - 1] ?? 0) / 1000).toFixed(1)} s`],
      ['unhandled promise rejections', String(unhandled)],
      ['violations', String(violations.length)],
    ];
    const cpus = os.cpus();
    const machine = `${os.type()} ${os.release()} ${os.arch()}, ${cpus.length} × ${cpus[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM, Node ${process.version}`;
    const lines = [
      '# Soak run (`npm run soak`)',
      '',
      'The last run of `scripts/soak.ts`: K simulated clusters (the operator SDK and the cluster model, each behind a',
      'fault-injecting link proxy) against the hub in real workerd on real Postgres, looping seeded random faults; after',
      'every storm the faults are healed, change stops, and every cluster must converge and hold the invariants of',
      '`test/e2e/support/converge.ts` (nothing acked lost, nothing pruned wrongly, desired bounds exactly as stored,',
      'operations accepted by the admin API stored and concluded exactly once). Timers are the e2e suites\' fast ones (ping 1 s, silence 3 s, poll 0.5 s,',
      'hole 2.5 s); SDK backoff 0.2 s → 2 s with full jitter. Convergence times are not a performance claim: the machine',
      'is shared and the point is that they are bounded.',
      '',
      `- command: \`${command}\``,
      `- hub source: ${source?.label ?? 'unknown'} (copied at the start; every restart runs it)`,
      `- date: ${new Date(started).toISOString()}`,
      `- machine: ${machine}`,
      `- database: ${databaseKind} (${pgVersion?.version.split(',')[0] ?? 'unknown'})`,
      `- duration: ${minutes} min of faults configured, ${(elapsed / 60_000).toFixed(1)} min wall clock in all`,
      `- seed: ${seed}`,
      `- clusters: ${k} (operator storage: ${members.map((m) => m.storageKind).join(', ')}; 3 nodes × 8 GPUs each)`,
      '',
      '| figure | value |',
      '|---|---|',
      ...figures.map(([a, b]) => `| ${a} | ${b} |`),
      '',
      '| fault | injected |',
      '|---|---|',
      ...FAULTS.map((f) => `| ${f} | ${faults[f]} |`),
      '',
      violations.length === 0 ? 'Violations: none.' : `Violations (${violations.length}):\n\n${violations.map((v) => `- cycle ${v.cycle}, ${v.cluster}: ${v.text}${(v.detail ?? []).map((d) => `\n  - ${d}`).join('')}`).join('\n')}`,
      '',
    ];
    const text = lines.join('\n');
    console.log(`\n${text}`);
    if (out !== '-') {
      await writeFile(out, text);
      console.log(`soak: figures written to ${out}`);
    }
    return violations.length === 0 && unhandled === 0 ? 0 : 1;
  } finally {
    for (const m of members) {
      await m.churn.stop();
      await Promise.allSettled(m.sim.running.map((p) => m.sim.stopProcess(p, { graceful: false, timeoutMs: 500 })));
      m.sim.dispose();
      await m.proxy.close();
    }
    await q?.close();
    await (hub as LaunchedHub | null)?.stop().catch(() => undefined);
    await (pgProxy as PgWsProxy | null)?.close().catch(() => undefined);
    await stack?.dropDatabase?.().catch(() => undefined);
    await stack?.close().catch(() => undefined);
    for (const d of [dataDir, ...persistDirs, ...stateDirs, ...(source ? [source.dir] : [])]) await rm(d, { recursive: true, force: true });
  }
}

function summarize(faults: string[]): string {
  const counts = new Map<string, number>();
  for (const f of faults) counts.set(f, (counts.get(f) ?? 0) + 1);
  return [...counts].map(([f, n]) => `${f} ×${n}`).join(', ') || 'none';
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error('soak:', err instanceof Error ? (err.stack ?? err.message) : err);
    process.exit(1);
  },
);
