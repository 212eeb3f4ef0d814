/**
 * The single desired change (admin PUT → deployment.desired at the operator) as the hub's workerd
 * process sees it at the system-call level: `strace` on workerd over N sequential changes, each
 * change cut into the spans between the calls that bound its hops:
 *
 *   the PUT read → the statement written to the Postgres proxy's socket → its ReadyForQuery read
 *   (Postgres committed) → the session's WAL fsync (its replay-buffer commit) → the frame written
 *   to the operator's socket → the admin's answer written
 *
 *   npx tsx bench/desired-syscalls.ts [--n 200] [--warm 100] [--commit REF] [--log FILE]
 *
 * Needs `strace` (Debian's package). strace slows every call it sees, so the spans are longer than
 * without it: read the order and the shares, and take the times from `npm run bench`. Locally
 * every one of these calls runs on workerd's one thread, the isolate's (so a span includes the
 * JavaScript that ran before its closing call). An experiment (bench/MICRO.md), not part of
 * `npm run bench`.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchEnv } from './lib/env';
import { installHubLogCapture } from './lib/hublog';
import { singleChanges } from './lib/single-change';
import { median, percentile } from './lib/stats';
import { changesOf, parseStrace, SPANS } from './lib/syscalls';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '200' },
    warm: { type: 'string', default: '100' },
    commit: { type: 'string' },
    /** Keep strace's log at this path (it is deleted otherwise). */
    log: { type: 'string' },
  },
});
const n = Number(args.n);
const warm = Number(args.warm);
if (![n, warm].every((v) => Number.isInteger(v) && v > 0)) throw new Error('--n and --warm take positive integers');

async function main(): Promise<void> {
  installHubLogCapture();
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-syscalls-'));
  const log = args.log ?? path.join(dir, 'strace.txt');
  const env = await BenchEnv.start({}, { commit: args.commit ?? null });
  try {
    const { change } = await singleChanges(env, 'syscalls');
    for (let i = 0; i < warm; i++) await change(`warm-${i}`);
    const strace = spawn('strace', ['-f', '-tt', '-T', '-s', '2048', '-e', 'trace=read,write,writev,fsync,fdatasync', '-o', log, '-p', String(env.workerdPid)], { stdio: 'ignore' });
    const exited = new Promise<number | null>((resolve) => strace.once('exit', resolve));
    strace.once('error', (err) => {
      throw new Error(`strace did not start (install Debian's strace): ${err.message}`);
    });
    // strace attaches to each thread in turn and says nothing when it is done: give it time.
    await new Promise((r) => setTimeout(r, 1500));
    const lat: number[] = [];
    for (let i = 0; i < n; i++) lat.push(await change(`c-${i}`));
    strace.kill('SIGINT');
    await exited;
    const changes = changesOf(parseStrace(await readFile(log, 'utf8')));
    if (changes.length < n / 2) throw new Error(`only ${changes.length} of ${n} changes found in the strace log (${log})`);
    console.log(`hub: ${env.source.label}`);
    console.log(`${n} single changes under strace, ${changes.length} found whole in the log; PUT → frame at the operator (bench client): median ${median(lat).toFixed(2)} ms, p90 ${percentile(lat, 90).toFixed(2)} ms\n`);
    const total = changes.map((c) => (c.frame - c.put) * 1000);
    console.log('| span | median | p90 | share of PUT read → frame |');
    console.log('|---|---:|---:|---:|');
    for (const [from, to, label] of SPANS) {
      const xs = changes.map((c) => ((c as Record<string, number>)[to] as number) - ((c as Record<string, number>)[from] as number)).map((s) => s * 1000);
      const share = to === 'answer' ? '—' : `${((100 * median(xs)) / median(total)).toFixed(0)}%`;
      console.log(`| ${label} | ${median(xs).toFixed(3)} ms | ${percentile(xs, 90).toFixed(3)} ms | ${share} |`);
    }
    console.log(`| **PUT read → frame written** | ${median(total).toFixed(3)} ms | ${percentile(total, 90).toFixed(3)} ms | |`);
  } finally {
    await env.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

void main();
