/** Renders bench/RESULTS.md from one run. */
import { renderAnalysis, type ProfileRun } from './analysis';
import { baselineDrift, compareRows, REGRESSION_TOLERANCE, type BeforeFile, type Row } from './compare';
import type { StackInfo } from './env';
import { fmtRepeated } from './format';
import type { MachineInfo } from './machine';
import type { Figure, ScenarioResult } from './types';

export interface ReportInput {
  command: string;
  /** What hub source was measured (commit or working-tree snapshot). */
  source?: string;
  /** Facts about the measured source the analysis depends on (see BenchEnv.facts). */
  facts?: Record<string, number>;
  machine: MachineInfo;
  stack: StackInfo;
  started: Date;
  totalS: number;
  quick: boolean;
  reps: number;
  results: ScenarioResult[];
  /** Average cores used by other work on the machine during each scenario. */
  foreign: Record<string, number>;
  /** Non-standard setup of this run (pooler, profiler, var overrides), or ''. */
  variant?: string;
  /** The figures before this rewrite (bench/before.json). */
  before?: BeforeFile;
  /** Said of the machine before the run (how long the run waited for it to be quiet, what else ran). */
  machineNote?: string;
  /** The CPU profiles the analysis quotes (bench/PROFILE.json, from a `--profile` run). */
  profiles?: ProfileRun;
  /** File name of the ratio chart written beside the report (bench/lib/chart.ts), if any. */
  chart?: string;
}

/** Scenarios whose targets the issue tables carry; the others' targets are listed as before. */
const ISSUE_SCENARIOS = new Set(['handshake', 'ingest', 'desired', 'fleet']);

function issueTable(rows: Row[]): string[] {
  const out = ['| Figure | Before | After (this run) | Target | Met |', '|---|---|---|---|---|'];
  for (const r of rows) {
    const met = r.met === undefined ? '—' : r.met ? 'met' : '**not met**';
    out.push(`| ${cell(r.label)} | ${cell(r.before)} | ${cell(r.after)} | ${cell(r.target ?? '—')} | ${met} |`);
  }
  return out;
}

function changeText(r: Row): string {
  if (r.change === undefined) return '—';
  const sign = r.change > 0 ? '+' : r.change < 0 ? '−' : '±';
  return `${sign}${Math.abs(r.change * 100).toFixed(Math.abs(r.change) < 0.1 ? 1 : 0)}%`;
}

function verdictText(r: Row): string {
  if (r.verdict === 'worse') return `**regressed** (worse than before by more than ${REGRESSION_TOLERANCE * 100}%)`;
  if (r.verdict === 'within') return `within ${REGRESSION_TOLERANCE * 100}%`;
  return r.verdict;
}

function renderComparison(r: ReportInput): string[] {
  if (!r.before) return [];
  const b = r.before;
  const rows = compareRows(r.results, b);
  const out: string[] = [];
  const from = `bench/RESULTS.md as committed on main at ${b.mainCommit} (the full run of ${b.measuredOn}, which measured commit ${b.measuredCommit}; copied into bench/before.json)`;
  out.push('## Issue 13: desired state, ingest and handshake — before and after', '');
  out.push(`Before: ${from}. After: this run. A target stated against Socket.IO + Postgres is judged against that baseline as measured in this run.`, '');
  out.push(...issueTable(rows.filter((x) => x.issue === 13)), '');
  out.push('## Issue 12: idle sessions — before and after', '');
  out.push(`Before: ${from}, except where the note says otherwise. After: this run's idle fleet (see its section for the method, including how residency is inferred).`, '');
  out.push(...issueTable(rows.filter((x) => x.issue === 12)), '');
  out.push('## Every other figure against its before', '');
  out.push(`Issue 13 asks that every other figure stay within ${REGRESSION_TOLERANCE * 100}% of its before or get better; a figure worse than that is flagged. Medians of this run's repetitions (single measurements where the section says so), so a flag on a p99 or a once-measured figure may be noise: the section shows each one's min–max.`, '');
  out.push('| Figure | Before | After | Change | |', '|---|---|---|---|---|');
  for (const x of rows.filter((y) => !y.issue)) out.push(`| ${cell(x.label)} | ${cell(x.before)} | ${cell(x.after)} | ${changeText(x)} | ${verdictText(x)} |`);
  const worse = rows.filter((x) => !x.issue && x.verdict === 'worse');
  out.push('', worse.length ? `Regressed beyond ${REGRESSION_TOLERANCE * 100}%: ${worse.map((x) => x.label).join('; ')}.` : `No figure is worse than before by more than ${REGRESSION_TOLERANCE * 100}%.`, '');
  const drift = baselineDrift(r.results, b);
  if (drift.length) {
    out.push(
      `The befores were taken on another day, and the machine moved too: its baselines, which no hub change touches, went from before to this run as follows — ${drift.join('; ')}. A hub figure that moved by about as much as its baseline did is the machine, not the hub; \`npm run bench -- --commit ${b.measuredCommit} --only …\` measures the old hub beside this one on the same day.`,
      '',
    );
  }
  if (b.checks?.length) {
    out.push(`Checks of the flagged figures, made on ${b.checksOn ?? 'the day of the rewrite'} with the old hub and this one on the same machine the same day (bench/before.json keeps them):`, '');
    for (const c of b.checks) out.push(`- ${c}`);
    out.push('');
  }
  return out;
}

function cell(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function figureRow(f: Figure): string {
  const hub = fmtRepeated(f.hub, f.unit);
  const base = (f.baselines ?? []).map((b) => `${b.label}: ${fmtRepeated(b.value, b.unit ?? f.unit)}`).join('<br>') || '—';
  const target = f.target ?? '—';
  const met = f.met === undefined ? '—' : f.met ? '**met**' : '**not met**';
  return `| ${cell(f.metric)} | ${cell(hub)} | ${cell(base)} | ${cell(f.compare ?? '—')} | ${cell(target)} | ${met} |`;
}

export function renderReport(r: ReportInput): string {
  const m = r.machine;
  const shared = Object.values(r.foreign).some((v) => v >= 0.15);
  const lines: string[] = [];
  lines.push('# Benchmark results');
  lines.push('');
  lines.push(
    `Generated by \`bench/run.ts\` on ${r.started.toISOString()}; rewritten by every full run. ${r.quick ? '**Quick (smoke) variant: sizes are reduced; not for comparison.**' : ''}`,
  );
  lines.push('');
  lines.push('## How this was produced');
  lines.push('');
  lines.push('```');
  lines.push(r.command);
  lines.push('```');
  lines.push('');
  if (r.source) lines.push(`- Hub measured: ${r.source}; the source is copied at the start of the run, so edits during it do not reach the running hub.`);
  lines.push(`- Machine: ${m.nproc} cores (\`nproc\`), ${m.cpuModel}, ${m.memory} RAM, ${m.kernel}.`);
  lines.push(`- Node ${m.node}; workerd ${m.workerd}; wrangler ${m.wrangler} (its dev environment, local mode; clients connect to the Worker's own workerd socket, bypassing wrangler's dev ProxyWorker — a second workerd process that relays every request and frame for live reload and is not part of a deployment${
      r.facts?.directSocket === 1
        ? "; and they connect to the Worker's direct socket, bypassing Miniflare's entry worker, with Miniflare's local explorer off, whose wrapper writes every named object's name into its storage at each construction: both dev-only, absent from a deployment (bench/lib/direct-socket.ts; `--dev-paths` measures through them)"
        : "; through Miniflare's entry worker, with its local explorer wrapping every object"
    }); Socket.IO ${m.socketIo}.`);
  lines.push(
    `- Postgres: ${r.stack.embedded ? 'embedded PGlite' : r.stack.serverVersion.split(',')[0]} at ${r.stack.database.replace(/\/[^/]*$/, '/…')} (max_connections ${r.stack.maxConnections}), a fresh database per run, dropped at the end; reached by the hub through the Neon driver and the WebSocket→TCP proxy (scripts/lib/pg-ws-proxy.ts, in its own process).`,
  );
  lines.push(
    `- Every figure is the median over the repetitions (up to ${r.reps}; a scenario that runs over its share of the time budget stops repeating), with min–max and the number of runs in parentheses; a figure without parentheses was measured once. Baselines ran within the same scenario, in the same process layout (each server in its own process, all clients in the benchmark process).`,
  );
  lines.push(`- Total wall time: ${r.totalS.toFixed(0)} s.`);
  if (r.variant) lines.push(`- **Experiment, not the standard setup:** ${r.variant}.`);
  const fl = Object.entries(r.foreign)
    .map(([k, v]) => `${k} ${v.toFixed(2)}`)
    .join(', ');
  lines.push(
    `- Machine sharing: load average before the run ${m.loadBefore.map((v) => v.toFixed(2)).join(' / ')}; other work (machine busy time minus this benchmark's processes and Postgres), in cores on average per scenario: ${fl}.${r.machineNote ? ` ${r.machineNote}` : ''}${shared ? ' **The machine was shared with other work while these numbers were taken; treat small differences as noise.**' : ''}`,
  );
  lines.push('');
  lines.push('Run it: `npm run bench` (full, rewrites this file, about 12 minutes: the idle fleet alone watches one 5-minute sweep period); `npm run bench -- --quick` (smoke, small sizes, report to a temp file); `--only handshake,ingest,desired,resume,resync,fleet`; `--reps N` (default 3); `--out FILE`. Experiments (never written here): `--pooler` (PgBouncer in transaction mode in front of Postgres), `--profile` (CPU profile of the hub isolate per scenario), `--var KEY=VALUE` (override a hub var), `--dev-paths` (clients through Miniflare\'s entry worker, its local explorer on: how runs before 2026-12-02 measured); `TMPDIR=/dev/shm npm run bench …` keeps the Durable Object storage of local workerd on tmpfs instead of the disk. A `--profile` run with `--out bench/PROFILE.md` also leaves bench/PROFILE.json, whose profiles the analysis below quotes.');
  lines.push('');
  if (r.chart) {
    lines.push(`![Every figure with a same-run baseline, as the hub's cost over the baseline's, with the targets](${r.chart})`);
    lines.push('');
  }
  lines.push(...renderComparison(r));
  lines.push(r.before ? '## Other targets' : '## Summary of targets');
  lines.push('');
  lines.push('| Target | Figure | Met |');
  lines.push('|---|---|---|');
  for (const res of r.results) {
    if (r.before && ISSUE_SCENARIOS.has(res.name)) continue;
    for (const f of res.figures) {
      if (f.target === undefined) continue;
      lines.push(`| ${cell(f.metric)}: ${cell(f.target)} | ${cell(fmtRepeated(f.hub, f.unit))}${f.compare ? ` (${cell(f.compare)})` : ''} | ${f.met ? 'met' : '**not met**'} |`);
    }
  }
  lines.push('');
  lines.push(...renderAnalysis(r.results, r.facts ?? {}, r.source ?? 'the measured source', r.profiles));
  for (const res of r.results) {
    lines.push(`## ${res.title}`);
    lines.push('');
    if (res.error) {
      lines.push(`**Failed:** ${res.error}`);
      lines.push('');
    }
    if (res.figures.length) {
      lines.push('| Measure | Hub | Baselines (same run) | Comparison | Target | |');
      lines.push('|---|---|---|---|---|---|');
      for (const f of res.figures) lines.push(figureRow(f));
      lines.push('');
    }
    if (res.method.length) {
      lines.push('Method:');
      lines.push('');
      for (const s of res.method) lines.push(`- ${s}`);
      lines.push('');
    }
    if (res.evidence.length) {
      lines.push('Counters and costs from this run:');
      lines.push('');
      for (const s of res.evidence) lines.push(`- ${s}`);
      lines.push('');
    }
    if (res.profile) {
      const p = res.profile;
      lines.push(`CPU profile of the hub isolate over ${res.profileScope ?? 'the whole scenario'} (${(p.busyMs / 1000).toFixed(1)} s attributed: time on the isolate's thread in JavaScript, GC and native calls, including native calls that wait on I/O; shares of that). \`index.js\` is wrangler's bundle of src/hub (line numbers are the bundle's); \`exec\`: Durable Object SQLite; \`inst._zod.*\`: zod's validators; \`fetch\`: a request to another object (locally, a new object's construction and SQLite file are inside it); \`rawWrite\`, \`parseRow\`: the Neon driver:`);
      lines.push('');
      lines.push('| self time | share | function |');
      lines.push('|---|---|---|');
      for (const f of p.topFunctions.slice(0, 12)) lines.push(`| ${f.selfMs.toFixed(0)} ms | ${(f.share * 100).toFixed(1)}% | \`${cell(f.name)}\` |`);
      lines.push('');
    }
    lines.push(`_Scenario wall time ${((res.elapsedMs ?? 0) / 1000).toFixed(0)} s; other work on the machine meanwhile ≈ ${(r.foreign[res.name] ?? 0).toFixed(2)} cores._`);
    lines.push('');
  }
  return `${lines.join('\n')}\n`;
}
