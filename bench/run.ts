/**
 * `npm run bench`: the hub in real workerd with real Postgres, each figure next to a baseline
 * measured in the same run; writes bench/RESULTS.md.
 *
 *   npm run bench                      full run (rewrites bench/RESULTS.md; about 12 minutes)
 *   npm run bench -- --quick           small smoke variant (writes to a temp file unless --out)
 *   npm run bench -- --only ingest,resume
 *   npm run bench -- --reps 5          repetitions of each timed measurement (default 3)
 *   npm run bench -- --out FILE        write the report here instead
 *   BENCH_MACHINE_NOTE=…               a sentence for the report's machine-sharing line
 *
 * Benchmarks are not tests: nothing here asserts on time. Targets are reported as met or not.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseBenchArgs, type BenchArgs } from './lib/args';
import { BenchEnv } from './lib/env';
import { installHubLogCapture } from './lib/hublog';
import { startPooler } from './lib/pooler';
import { Inspector } from './lib/profiler';
import { machineInfo } from './lib/machine';
import { ForeignLoad } from './lib/proc';
import type { BeforeFile } from './lib/compare';
import type { ProfileRun } from './lib/analysis';
import { ratioBars, ratioChartSvg } from './lib/chart';
import { renderReport, type ReportInput } from './lib/report';
import type { Scenario, ScenarioResult } from './lib/types';
import { handshake } from './scenarios/handshake';
import { ingest } from './scenarios/ingest';
import { desired } from './scenarios/desired';
import { resume } from './scenarios/resume';
import { resync } from './scenarios/resync';
import { fleet } from './scenarios/fleet';

const SCENARIOS: Scenario[] = [handshake, ingest, desired, resume, resync, fleet];
const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv: string[]): BenchArgs {
  const a = parseBenchArgs(argv, SCENARIOS.map((s) => s.name));
  if (a !== 'help') return a;
  console.log('usage: npm run bench -- [--quick] [--only name,...] [--reps N] [--out FILE] [--pooler] [--profile] [--var KEY=VALUE]');
  console.log('  --commit REF  measure the committed hub of REF (git archive) instead of the working tree');
  console.log('  BENCH_MACHINE_NOTE=TEXT (environment)  added to the report\'s machine-sharing line, e.g. how long the run waited for a quiet machine');
  console.log("  --dev-paths  measure through Miniflare's dev-only paths, as runs before 2026-12-02 did: its entry worker in front of the Worker, its local explorer's wrapper around every Durable Object (default: neither)");
  console.log('  --pooler   experiment: PgBouncer (transaction pooling) in front of Postgres');
  console.log('  --profile  also record a CPU profile of the hub isolate per scenario (slows the hub; figures are then not results)');
  console.log('  --var      override a hub configuration var (experiments, e.g. --var INGEST_BATCH_FRAMES=5000)');
  console.log(`scenarios: ${SCENARIOS.map((s) => s.name).join(', ')}`);
  process.exit(0);
}

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

/** Everything a report is rendered from; saved after every run so `--render` can redo the text. */
const RAW = path.join(tmpdir(), 'wingsmith-bench-results.json');
/** The figures before this rewrite of the benchmark (see the file's `about`). */
const BEFORE = JSON.parse(readFileSync(path.join(HERE, 'before.json'), 'utf8')) as BeforeFile;
/**
 * The profiles the analysis quotes: a `--profile` run writes its summaries next to its report
 * (`--out bench/PROFILE.md` → bench/PROFILE.json); a normal run reads them from there.
 */
const PROFILES = path.join(HERE, 'PROFILE.json');
function loadProfiles(): ProfileRun | undefined {
  return existsSync(PROFILES) ? (JSON.parse(readFileSync(PROFILES, 'utf8')) as ProfileRun) : undefined;
}

/** The ratio chart beside the report (RESULTS.md → RESULTS.svg); its file name, for the report's link. */
function writeChart(reportPath: string, results: ScenarioResult[]): string | undefined {
  const bars = ratioBars(results);
  if (bars.length === 0) return undefined;
  const file = `${reportPath.replace(/\.md$/, '')}.svg`;
  writeFileSync(file, ratioChartSvg(bars, 'Wingsmith Hub against its baselines (medians of this run)'));
  return path.basename(file);
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  // Made before the run, not found missing after it (the report is written last).
  if (args.out) mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
  if (args.render) {
    const input = JSON.parse(readFileSync(args.render, 'utf8')) as ReportInput & { started: string };
    const profiles = loadProfiles();
    const out = args.out ?? path.join(HERE, 'RESULTS.md');
    const chart = writeChart(out, input.results);
    const report = renderReport({ ...input, before: BEFORE, ...(profiles ? { profiles } : {}), started: new Date(input.started), chart });
    writeFileSync(out, report);
    log(`re-rendered ${args.render} → ${out}`);
    return;
  }
  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
  const machine = machineInfo();
  const selected = SCENARIOS.filter((s) => !args.only || args.only.includes(s.name));
  const started = new Date();
  const t0 = performance.now();
  log(`${command}: ${selected.map((s) => s.name).join(', ')} (${args.quick ? 'quick' : 'full'}, ${args.reps} rep(s))`);
  installHubLogCapture();
  const pooler = args.pooler ? await startPooler() : null;
  if (pooler) log(`PgBouncer (transaction pooling) at ${pooler.url}`);
  const env = await BenchEnv.start(args.vars, { inspector: args.profile, commit: args.commit, devPaths: args.devPaths, ...(pooler ? { databaseUrl: pooler.url } : {}) });
  log(`hub source: ${env.source.label}`);
  const facts = await env.facts();

  log(`hub at ${env.hubUrl}; Postgres: ${env.stack.database} (${env.stack.serverVersion.split(' on ')[0]})`);
  const results: ScenarioResult[] = [];
  const foreign: Record<string, number> = {};
  try {
    for (const s of selected) {
      log(`— ${s.name}: ${s.title}`);
      const fl = new ForeignLoad();
      fl.start();
      const ts = performance.now();
      if (s.freshHub && results.length > 0) {
        await env.restartHub();
        log('  (fresh hub: new workerd and object storage, same database)');
      }
      let r: ScenarioResult;
      try {
        const budgetMs = s.budgetS * 1000 * (args.reps / 3);
        // Per scenario: a scenario may restart the hub (new workerd, new inspector).
        const inspector = args.profile && env.inspectorUrl ? await Inspector.connect(env.inspectorUrl) : undefined;
        const ctx = {
          env,
          quick: args.quick,
          reps: args.reps,
          log: (m: string) => log(`  ${m}`),
          overBudget: () => !args.quick && performance.now() - ts > budgetMs,
          ...(inspector ? { inspector } : {}),
        };
        if (inspector && s.profilesItself) {
          r = await s.run(ctx);
          inspector.close();
        } else if (inspector) {
          const [res, prof] = await inspector.profile(() => s.run(ctx));
          r = res;
          if (prof) r.profile = prof;
          else log('  no profile for this scenario (the hub was restarted under it)');
          inspector.close();
        } else r = await s.run(ctx);
      } catch (err) {
        log(`  ${s.name} failed: ${err instanceof Error ? err.stack : String(err)}`);
        r = { name: s.name, title: s.title, method: [], figures: [], evidence: [], error: err instanceof Error ? err.message : String(err) };
      }
      r.elapsedMs = performance.now() - ts;
      foreign[s.name] = fl.stop();
      results.push(r);
      log(`  ${s.name} done in ${(r.elapsedMs / 1000).toFixed(1)} s (other work on the machine: ${foreign[s.name]?.toFixed(2)} cores on average)`);
    }
  } finally {
    await env.stop();
    await pooler?.stop();
  }
  const totalS = (performance.now() - t0) / 1000;
  const input: ReportInput = {
    command,
    source: env.source.label,
    facts,
    machine,
    stack: env.stack,
    started,
    totalS,
    quick: args.quick,
    reps: args.reps,
    results,
    foreign,
    variant: [pooler ? 'PgBouncer (transaction pooling) between the proxy and Postgres' : '', args.profile ? 'CPU profiler attached to the hub (slower)' : '', Object.keys(args.vars).length ? `hub vars ${JSON.stringify(args.vars)}` : '']
      .filter(Boolean)
      .join('; '),
    before: BEFORE,
    ...(process.env.BENCH_MACHINE_NOTE ? { machineNote: process.env.BENCH_MACHINE_NOTE } : {}),
  };
  const profiles = args.profile ? undefined : loadProfiles();
  if (profiles) input.profiles = profiles;
  writeFileSync(RAW, JSON.stringify(input));
  const full = !args.quick && !args.only && !args.pooler && !args.profile && Object.keys(args.vars).length === 0;
  const out = args.out ?? (full ? path.join(HERE, 'RESULTS.md') : path.join(tmpdir(), 'wingsmith-bench-RESULTS.md'));
  // The raw figures beside the report too, so its text can be redone after a later run replaced RAW.
  writeFileSync(`${out.replace(/\.md$/, '')}.raw.json`, JSON.stringify(input));
  input.chart = writeChart(out, results);
  const report = renderReport(input);
  writeFileSync(out, report);
  if (args.profile) {
    // Merged by scenario into what is there: a later `--only` run replaces just its scenarios.
    const file = `${out.replace(/\.md$/, '')}.json`;
    const prior = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as ProfileRun) : { profiles: {} };
    const run: ProfileRun = { profiles: { ...prior.profiles } };
    for (const r of results) {
      if (r.profile) run.profiles[r.name] = { ...r.profile, scope: r.profileScope ?? 'the whole scenario', command, source: env.source.label, started: started.toISOString(), ...(r.data ? { data: r.data } : {}) };
    }
    writeFileSync(file, `${JSON.stringify(run, null, 1)}\n`);
  }
  log(`done in ${totalS.toFixed(0)} s; report: ${out} (raw: ${RAW})`);
  process.stdout.write(report);
  // Clients and timers of the load generators are not worth waiting for.
  process.exit(0);
}

main().catch((err: unknown) => {
  log(`bench failed: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
