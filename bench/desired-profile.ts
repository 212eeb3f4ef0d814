/**
 * Where the isolate's time goes on the single desired change (admin PUT → deployment.desired at
 * the operator): a CPU profile of the hub's isolate over N sequential changes, summarised by self
 * and inclusive time per function, per change. The full benchmark's `--profile` covers a whole
 * scenario (bulk, singles and bursts together, self time only); this isolates the singles:
 *
 *   npx tsx bench/desired-profile.ts [--n 600] [--warm 200] [--interval-us 100] [--top 40]
 *
 * The profiler slows the hub (more so at a fine interval): the times are shares of where the
 * isolate's thread went, not results. `index.js` is wrangler's bundle of src/hub.
 */
import { parseArgs } from 'node:util';
import { BenchEnv } from './lib/env';
import { installHubLogCapture } from './lib/hublog';
import { Inspector } from './lib/profiler';
import { singleChanges } from './lib/single-change';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '600' },
    warm: { type: 'string', default: '200' },
    'interval-us': { type: 'string', default: '100' },
    top: { type: 'string', default: '40' },
  },
});
const n = Number(args.n);
const warm = Number(args.warm);
const intervalUs = Number(args['interval-us']);
const top = Number(args.top);
if (![n, warm, intervalUs, top].every((v) => Number.isInteger(v) && v > 0)) throw new Error('--n, --warm, --interval-us and --top take positive integers');

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
}

/** Self and inclusive µs per function (a recursive function counted once per sample). */
function attribute(p: CpuProfile): { busyUs: number; idleUs: number; self: Map<string, number>; inclusive: Map<string, number> } {
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const parent = new Map<number, number>();
  for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
  const name = (id: number) => {
    const f = (byId.get(id) as CpuProfile['nodes'][number]).callFrame;
    return `${f.functionName || '(anonymous)'} ${f.url ? `${f.url.replace(/^.*\//, '')}:${f.lineNumber + 1}` : '(native)'}`;
  };
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let busyUs = 0;
  let idleUs = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i] as number;
    const dt = p.timeDeltas[i + 1] ?? 0;
    const fn = (byId.get(id) as CpuProfile['nodes'][number]).callFrame.functionName;
    if (fn === '(idle)' || fn === '(program)') {
      idleUs += dt;
      continue;
    }
    busyUs += dt;
    const own = name(id);
    self.set(own, (self.get(own) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const k = name(cur);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + dt);
    }
  }
  return { busyUs, idleUs, self, inclusive };
}

async function main(): Promise<void> {
  installHubLogCapture();
  const env = await BenchEnv.start({}, { inspector: true, commit: null });
  try {
    const { change } = await singleChanges(env, 'profile');
    for (let i = 0; i < warm; i++) await change(`warm-${i}`);
    if (!env.inspectorUrl) throw new Error('the hub was started without its inspector');
    const inspector = await Inspector.connect(env.inspectorUrl);
    await inspector.send('Profiler.enable');
    await inspector.send('Profiler.setSamplingInterval', { interval: intervalUs });
    await inspector.send('Profiler.start');
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await change(`p-${i}`);
    const wallMs = performance.now() - t0;
    const { profile } = await inspector.send<{ profile: CpuProfile }>('Profiler.stop');
    inspector.close();
    const a = attribute(profile);
    const per = (us: number) => `${(us / 1000 / n).toFixed(3)} ms`;
    const share = (us: number) => `${((100 * us) / a.busyUs).toFixed(1)}%`;
    console.log(`hub: ${env.source.label}`);
    console.log(`${n} single changes in ${(wallMs / 1000).toFixed(1)} s; isolate busy ${per(a.busyUs)} per change (idle ${per(a.idleUs)}), sampled every ${intervalUs} µs\n`);
    for (const [title, m] of [['self time', a.self], ['inclusive time', a.inclusive]] as const) {
      console.log(`| ${title} per change | share | function |\n|---:|---:|---|`);
      for (const [k, v] of [...m].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`| ${per(v)} | ${share(v)} | \`${k}\` |`);
      console.log('');
    }
  } finally {
    await env.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
