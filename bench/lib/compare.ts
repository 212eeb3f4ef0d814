/**
 * Before, after and target for every figure issues 12 and 13 name, and a regression check of
 * every other figure against its before (issue 13: each stays within 10% or gets better). The
 * befores are bench/before.json (copied from RESULTS.md as it stood before this rewrite); the
 * afters come from this run's scenario data; targets that depend on a same-run baseline
 * (Socket.IO + Postgres) are judged against this run's baseline. Pure.
 */
import { fmtMs, fmtNum, pct, ratio } from './format';
import type { ScenarioResult } from './types';

type Data = Record<string, number>;
export type RunData = Record<string, Data | undefined>;

export interface Before {
  value: number | null;
  note?: string;
}

export interface BeforeFile {
  mainCommit: string;
  measuredCommit: string;
  measuredOn: string;
  figures: Record<string, Before>;
  /** Baselines of the same runs ("scenario.dataKey"): how much the machine itself moved. */
  baselines?: Record<string, { value: number; label: string; unit: string }>;
  /** Same-day checks of flagged figures made while the befores were current (the old hub beside the new). */
  checks?: string[];
  checksOn?: string;
}

export interface Tracked {
  id: string;
  issue?: 12 | 13;
  label: string;
  unit: string;
  better: 'lower' | 'higher';
  after(d: RunData): number | undefined;
  /** More about this run's value (a ratio to a baseline, the share of a ceiling). */
  detail?(d: RunData): string;
  target?(d: RunData): { text: string; met: boolean };
}

/** How much worse than before a figure may get before it is flagged (issue 13). */
export const REGRESSION_TOLERANCE = 0.1;

const v = (d: RunData, scenario: string, key: string): number | undefined => {
  const x = d[scenario]?.[key];
  return x !== undefined && Number.isFinite(x) ? x : undefined;
};
const finite = (...xs: (number | undefined)[]): boolean => xs.every((x) => x !== undefined && Number.isFinite(x));

/** A target of the form "≤ the same-run baseline". */
function atMostBaseline(hub: number | undefined, base: number | undefined, what: string): { text: string; met: boolean } {
  return { text: `≤ ${what}${base !== undefined ? ` (${fmtMs(base)} this run)` : ''}`, met: finite(hub, base) && (hub as number) <= (base as number) };
}

export const TRACKED: Tracked[] = [
  {
    id: 'desired.single',
    issue: 13,
    label: 'single desired change, PUT → frame at operator (median)',
    unit: 'ms',
    better: 'lower',
    after: (d) => v(d, 'desired', 'hubMs'),
    detail: (d) => `${ratio((v(d, 'desired', 'hubMs') ?? NaN) / (v(d, 'desired', 'sioDbMs') ?? NaN))} Socket.IO + Postgres`,
    target: (d) => atMostBaseline(v(d, 'desired', 'hubMs'), v(d, 'desired', 'sioDbMs'), 'Socket.IO + Postgres'),
  },
  {
    id: 'desired.burst',
    issue: 13,
    label: 'burst of 1,000 single PUTs → all at operator',
    unit: 'ms',
    better: 'lower',
    after: (d) => v(d, 'desired', 'hubBurstMs'),
    detail: (d) => `${ratio((v(d, 'desired', 'hubBurstMs') ?? NaN) / (v(d, 'desired', 'sioDbBurstMs') ?? NaN))} Socket.IO + Postgres`,
    target: (d) => atMostBaseline(v(d, 'desired', 'hubBurstMs'), v(d, 'desired', 'sioDbBurstMs'), 'Socket.IO + Postgres'),
  },
  {
    id: 'desired.bulk',
    issue: 13,
    label: '1,000 changes in one bulk request → all at operator',
    unit: 'ms',
    better: 'lower',
    after: (d) => v(d, 'desired', 'hubBulkMs'),
    detail: (d) => `Socket.IO + Postgres with the same statement: ${fmtMs(v(d, 'desired', 'sioDbBulkMs') ?? NaN)}`,
    target: (d) => ({ text: '≤ 150 ms', met: (v(d, 'desired', 'hubBulkMs') ?? Infinity) <= 150 }),
  },
  {
    id: 'ingest.one',
    issue: 13,
    label: 'ingest, one session, acked after commit',
    unit: 'frames/s',
    better: 'higher',
    after: (d) => v(d, 'ingest', 'hubFps'),
    detail: (d) => `${pct(v(d, 'ingest', 'fraction') ?? NaN)} of the echo ceiling (${fmtNum(v(d, 'ingest', 'echoFps') ?? NaN, 0)})`,
    target: (d) => ({
      text: '≥ 60,000 frames/s and ≥ 65% of the ceiling',
      met: (v(d, 'ingest', 'hubFps') ?? 0) >= 60_000 && (v(d, 'ingest', 'fraction') ?? 0) >= 0.65,
    }),
  },
  {
    id: 'ingest.multiShare',
    issue: 13,
    label: 'ingest, 50 sessions, share of the echo ceiling',
    unit: '%',
    better: 'higher',
    after: (d) => {
      const hub = v(d, 'ingest', 'multiFps');
      const echo = v(d, 'ingest', 'multiEchoFps');
      return finite(hub, echo) ? ((hub as number) / (echo as number)) * 100 : undefined;
    },
    detail: (d) => `${fmtNum(v(d, 'ingest', 'multiFps') ?? NaN, 0)} frames/s of the echo's ${fmtNum(v(d, 'ingest', 'multiEchoFps') ?? NaN, 0)}`,
    target: (d) => {
      const hub = v(d, 'ingest', 'multiFps');
      const echo = v(d, 'ingest', 'multiEchoFps');
      return { text: '≥ 55% of the ceiling', met: finite(hub, echo) && (hub as number) / (echo as number) >= 0.55 };
    },
  },
  {
    id: 'handshake.welcome',
    issue: 13,
    label: 'connect → welcome (median)',
    unit: 'ms',
    better: 'lower',
    after: (d) => v(d, 'handshake', 'hubMedianMs'),
    target: (d) => ({ text: '≤ 10 ms', met: (v(d, 'handshake', 'hubMedianMs') ?? Infinity) <= 10 }),
  },
  {
    id: 'handshake.storm',
    issue: 13,
    label: '1,000-operator connect storm → all welcomed',
    unit: 's',
    better: 'lower',
    after: (d) => v(d, 'handshake', 'stormS'),
    target: (d) => ({ text: '≤ 6 s', met: (v(d, 'handshake', 'stormS') ?? Infinity) <= 6 }),
  },
  {
    id: 'fleet.wakes',
    issue: 12,
    label: 'wakes per idle session per minute',
    unit: '',
    better: 'lower',
    after: (d) => v(d, 'fleet', 'wakesPerMin'),
    target: (d) => ({ text: '≤ 3', met: (v(d, 'fleet', 'wakesPerMin') ?? Infinity) <= 3 }),
  },
  {
    id: 'fleet.outOfMemory',
    issue: 12,
    label: 'idle session objects out of memory (lowest share at any instant)',
    unit: '%',
    better: 'higher',
    after: (d) => {
      const x = v(d, 'fleet', 'outOfMemoryMin');
      return x === undefined ? undefined : x * 100;
    },
    detail: (d) => `mean ${pct(v(d, 'fleet', 'outOfMemoryMean') ?? NaN)}`,
    target: (d) => ({ text: '≥ 50%', met: (v(d, 'fleet', 'outOfMemoryMin') ?? 0) >= 0.5 }),
  },
  {
    id: 'fleet.rss',
    issue: 12,
    label: 'workerd RSS per idle session',
    unit: 'KiB',
    better: 'lower',
    after: (d) => v(d, 'fleet', 'perSessionKiB'),
    target: (d) => ({ text: '≤ 200 KiB', met: (v(d, 'fleet', 'perSessionKiB') ?? Infinity) <= 200 }),
  },
  {
    id: 'fleet.cpu',
    issue: 12,
    label: 'workerd CPU for 1,000 idle sessions',
    unit: 'cores',
    better: 'lower',
    after: (d) => v(d, 'fleet', 'cpuCores'),
    target: (d) => ({ text: '≤ 0.05 cores', met: (v(d, 'fleet', 'cpuCores') ?? Infinity) <= 0.05 }),
  },
  {
    id: 'fleet.pg',
    issue: 12,
    label: 'Postgres transactions/s for 1,000 idle sessions',
    unit: 'tx/s',
    better: 'lower',
    after: (d) => v(d, 'fleet', 'xactsPerS'),
    target: (d) => ({ text: '≤ 2 tx/s', met: (v(d, 'fleet', 'xactsPerS') ?? Infinity) <= 2 }),
  },
  { id: 'handshake.p99', label: 'connect → welcome, p99', unit: 'ms', better: 'lower', after: (d) => v(d, 'handshake', 'hubP99Ms') },
  { id: 'handshake.cpu', label: 'workerd CPU per fresh handshake', unit: 'ms', better: 'lower', after: (d) => v(d, 'handshake', 'cpuPerConnectMs') },
  { id: 'ingest.p50', label: 'ingest ack latency p50 at saturation', unit: 'ms', better: 'lower', after: (d) => v(d, 'ingest', 'hubP50') },
  { id: 'ingest.p99', label: 'ingest ack latency p99 at saturation', unit: 'ms', better: 'lower', after: (d) => v(d, 'ingest', 'hubP99') },
  { id: 'ingest.pacedP50', label: 'ingest ack latency p50 paced at 5,000 frames/s', unit: 'ms', better: 'lower', after: (d) => v(d, 'ingest', 'pacedP50') },
  { id: 'ingest.pacedP99', label: 'ingest ack latency p99 paced at 5,000 frames/s', unit: 'ms', better: 'lower', after: (d) => v(d, 'ingest', 'pacedP99') },
  { id: 'ingest.cpuPerFrame', label: 'workerd CPU per ingested frame', unit: 'µs', better: 'lower', after: (d) => v(d, 'ingest', 'workerdUsPerFrame') },
  { id: 'ingest.multi', label: 'ingest, 50 sessions, total', unit: 'frames/s', better: 'higher', after: (d) => v(d, 'ingest', 'multiFps') },
  { id: 'desired.singleP99', label: 'single desired change, p99', unit: 'ms', better: 'lower', after: (d) => v(d, 'desired', 'hubP99Ms') },
  { id: 'desired.burstP99', label: 'burst of single PUTs, per-change latency p99', unit: 'ms', better: 'lower', after: (d) => v(d, 'desired', 'burstP99Ms') },
  { id: 'resume.both', label: 'resume, 1,000 unacked frames each side → caught up', unit: 'ms', better: 'lower', after: (d) => v(d, 'resume', 'totalMs') },
  { id: 'resume.down', label: 'resume, hub → operator 1,000 frames replayed', unit: 'ms', better: 'lower', after: (d) => v(d, 'resume', 'downOnlyMs') },
  { id: 'resume.live', label: 'live delivery of 1,000 frames (fresh session)', unit: 'ms', better: 'lower', after: (d) => v(d, 'resume', 'deliverHubMs') },
  { id: 'resync.total', label: 'full resync end to end', unit: 'ms', better: 'lower', after: (d) => v(d, 'resync', 'totalMs') },
  { id: 'resync.down', label: 'full resync, hub → operator', unit: 'ms', better: 'lower', after: (d) => v(d, 'resync', 'downMs') },
  { id: 'resync.up', label: 'full resync, operator → hub applied and pruned', unit: 'ms', better: 'lower', after: (d) => v(d, 'resync', 'upMs') },
  { id: 'resync.peakRss', label: 'workerd peak RSS during a full resync', unit: 'MiB', better: 'lower', after: (d) => v(d, 'resync', 'peakRssMiB') },
  { id: 'resync.cpu', label: 'workerd CPU per full resync', unit: 's', better: 'lower', after: (d) => v(d, 'resync', 'workerdCpuS') },
];

export interface Row {
  id: string;
  issue?: 12 | 13;
  label: string;
  before: string;
  after: string;
  target?: string;
  met?: boolean;
  /** after / before − 1 (positive: larger). */
  change?: number;
  verdict: 'better' | 'within' | 'worse' | 'new' | 'missing';
}

export function withUnit(x: number, unit: string): string {
  if (unit === 'ms') return fmtMs(x);
  if (unit === '%') return `${fmtNum(x, x >= 10 ? 0 : 1)}%`;
  return unit ? `${fmtNum(x)} ${unit}` : fmtNum(x);
}

/** How `after` compares with `before` for a figure that is better `better`. */
export function verdict(before: number | null, after: number | undefined, better: 'lower' | 'higher', tolerance = REGRESSION_TOLERANCE): Row['verdict'] {
  if (after === undefined) return 'missing';
  if (before === null) return 'new';
  if (better === 'lower') return after <= before ? 'better' : after <= before * (1 + tolerance) ? 'within' : 'worse';
  return after >= before ? 'better' : after >= before * (1 - tolerance) ? 'within' : 'worse';
}

export function runData(results: readonly ScenarioResult[]): RunData {
  return Object.fromEntries(results.filter((r) => !r.error && r.data).map((r) => [r.name, r.data]));
}

export function compareRows(results: readonly ScenarioResult[], before: BeforeFile, tracked: readonly Tracked[] = TRACKED): Row[] {
  const d = runData(results);
  return tracked.map((t) => {
    const b = before.figures[t.id] ?? { value: null };
    const a = t.after(d);
    const tg = t.target?.(d);
    const beforeText = b.value === null ? (b.note ?? '—') : `${withUnit(b.value, t.unit)}${b.note ? `; ${b.note}` : ''}`;
    const afterText = a === undefined ? 'not measured' : `${withUnit(a, t.unit)}${t.detail ? `; ${t.detail(d)}` : ''}`;
    return {
      id: t.id,
      ...(t.issue ? { issue: t.issue } : {}),
      label: t.label,
      before: beforeText,
      after: afterText,
      ...(tg ? { target: tg.text } : {}),
      ...(tg && a !== undefined ? { met: tg.met } : {}),
      ...(a !== undefined && b.value !== null && b.value !== 0 ? { change: a / b.value - 1 } : {}),
      verdict: verdict(b.value, a, t.better),
    };
  });
}

/** "ws echo ceiling 89,730 → 75,039 frames/s (−16%)", one per baseline this run measured. */
export function baselineDrift(results: readonly ScenarioResult[], before: BeforeFile): string[] {
  const d = runData(results);
  return Object.entries(before.baselines ?? {}).flatMap(([key, b]) => {
    const [scenario = '', field = ''] = key.split('.');
    const now = v(d, scenario, field);
    if (now === undefined) return [];
    const change = now / b.value - 1;
    return [`${b.label} ${withUnit(b.value, b.unit)} → ${withUnit(now, b.unit)} (${change >= 0 ? '+' : '−'}${Math.abs(change * 100).toFixed(0)}%)`];
  });
}
