/**
 * The single desired change (admin PUT → deployment.desired at the operator) as the hub's workerd
 * process sees it at the system-call level: `strace` on workerd over N sequential changes, each
 * change cut into the spans between the calls that bound its hops:
 *
 *   the PUT read → the statement written to the Postgres proxy's socket → its ReadyForQuery read
 *   (Postgres committed) → the session's WAL fsync (its replay-buffer commit) → the frame written
 *   to the operator's socket → the admin's answer written
 *
 *   npx tsx bench/desired-syscalls.ts [--n 200] [--warm 100] [--storage disk,tmpfs] [--commit REF]
 *                                     [--log FILE] [--svg FILE]
 *
 * `--storage` runs the hub once per entry, one after the other: `disk` keeps workerd's object
 * storage under the system's temporary directory, as every benchmark does; `tmpfs` under /dev/shm,
 * where an fsync costs nothing, the baseline that shows what the disk adds. Needs `strace`
 * (Debian's package). strace slows every call it sees, so the spans are longer than without it:
 * read the order and the shares, and take the times from `npm run bench`. Locally every one of
 * these calls runs on workerd's one thread, the isolate's (so a span includes the JavaScript that
 * ran before its closing call). An experiment (bench/MICRO.md), not part of `npm run bench`.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchEnv } from './lib/env';
import { installHubLogCapture } from './lib/hublog';
import { singleChanges } from './lib/single-change';
import { spanChartSvg } from './lib/span-chart';
import { median, percentile } from './lib/stats';
import { changesOf, parseStrace, SPANS, type Mark } from './lib/syscalls';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '200' },
    warm: { type: 'string', default: '100' },
    storage: { type: 'string', default: 'disk,tmpfs' },
    commit: { type: 'string' },
    /** Keep strace's log of the last run at this path (it is deleted otherwise). */
    log: { type: 'string' },
    svg: { type: 'string' },
  },
});
const n = Number(args.n);
const warm = Number(args.warm);
if (![n, warm].every((v) => Number.isInteger(v) && v > 0)) throw new Error('--n and --warm take positive integers');
const storages = args.storage.split(',').map((s) => s.trim());
for (const s of storages) if (s !== 'disk' && s !== 'tmpfs') throw new Error(`--storage takes disk and tmpfs, not ${s}`);

interface Run {
  storage: string;
  hub: string;
  client: number[];
  changes: Record<Mark, number>[];
}

const spanMs = (c: Record<Mark, number>, from: Mark, to: Mark) => (c[to] - c[from]) * 1000;

async function measure(storage: string, log: string): Promise<Run> {
  const saved = process.env.TMPDIR;
  // The hub's object storage goes where `os.tmpdir()` says when its environment is made.
  if (storage === 'tmpfs') process.env.TMPDIR = '/dev/shm';
  let env: BenchEnv;
  try {
    env = await BenchEnv.start({}, { commit: args.commit ?? null });
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  }
  try {
    const { change } = await singleChanges(env, `syscalls-${storage}`);
    for (let i = 0; i < warm; i++) await change(`warm-${i}`);
    const strace = spawn('strace', ['-f', '-tt', '-T', '-s', '2048', '-e', 'trace=read,write,writev,fsync,fdatasync', '-o', log, '-p', String(env.workerdPid)], { stdio: 'ignore' });
    const exited = new Promise<void>((resolve, reject) => {
      strace.once('exit', () => resolve());
      strace.once('error', (err) => reject(new Error(`strace did not start (install Debian's strace): ${err.message}`)));
    });
    // strace attaches to each thread in turn and says nothing when it is done: give it time.
    await Promise.race([exited, new Promise((r) => setTimeout(r, 1500))]);
    const client: number[] = [];
    for (let i = 0; i < n; i++) client.push(await change(`c-${i}`));
    strace.kill('SIGINT');
    await exited;
    const changes = changesOf(parseStrace(await readFile(log, 'utf8')));
    if (changes.length < n / 2) throw new Error(`only ${changes.length} of ${n} changes found in the strace log (${log})`);
    return { storage, hub: env.source.label, client, changes };
  } finally {
    await env.stop();
  }
}

async function main(): Promise<void> {
  installHubLogCapture();
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-syscalls-'));
  const log = args.log ?? path.join(dir, 'strace.txt');
  try {
    const runs: Run[] = [];
    for (const s of storages) runs.push(await measure(s, log));
    console.log(`hub: ${runs[0]?.hub}`);
    for (const r of runs) {
      console.log(
        `${r.storage}: ${n} single changes under strace, ${r.changes.length} found whole in the log; PUT → frame at the operator (bench client): median ${median(r.client).toFixed(2)} ms, p90 ${percentile(r.client, 90).toFixed(2)} ms`,
      );
    }
    console.log(`\n| span (median, ms; share of PUT read → frame) | ${runs.map((r) => r.storage).join(' | ')} |`);
    console.log(`|---|${runs.map(() => '---:').join('|')}|`);
    const totals = runs.map((r) => median(r.changes.map((c) => spanMs(c, 'put', 'frame'))));
    // Per run, the median of each span, in SPANS's order: the table's cells and the chart's bars.
    const medians = runs.map((r) => SPANS.map(([from, to]) => median(r.changes.map((c) => spanMs(c, from, to)))));
    SPANS.forEach(([, to, label], k) => {
      const cells = runs.map((_, i) => {
        const m = medians[i]?.[k] as number;
        return to === 'answer' ? m.toFixed(3) : `${m.toFixed(3)} (${((100 * m) / (totals[i] as number)).toFixed(0)}%)`;
      });
      console.log(`| ${label} | ${cells.join(' | ')} |`);
    });
    console.log(`| **PUT read → frame written** | ${totals.map((t) => `**${t.toFixed(3)}**`).join(' | ')} |`);
    if (args.svg) {
      // Up to the frame: the answer comes after it and is no part of the change's latency.
      const toFrame = SPANS.flatMap(([, to, label], k) => (to === 'answer' ? [] : [{ label, k }]));
      const svg = spanChartSvg({
        title: 'A single desired change in the hub’s workerd, PUT read → frame written (strace)',
        subtitle: `median of each span, ${n} changes per run, summed at the end; under strace: read the shares`,
        spans: toFrame.map((s) => s.label),
        runs: runs.map((r, i) => ({ label: `storage on ${r.storage}`, ms: toFrame.map((s) => medians[i]?.[s.k] as number) })),
      });
      await writeFile(args.svg, svg);
      console.log(`\nchart: ${args.svg}`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

void main();
