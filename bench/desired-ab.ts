/**
 * The single desired change (admin PUT → deployment.desired frame at the operator), two hub trees
 * side by side in one run: a baseline ref (its source as committed) and the working tree, each in
 * a workerd of its own on a fresh database, taken in turns change by change (the order flipped
 * every change) so the machine's drift moves both alike. Reports each tree's median and p90
 * latency, workerd CPU per change (the operator's acks included) and the ratios, per block and
 * over all blocks:
 *
 *   npx tsx bench/desired-ab.ts [--baseline HEAD] [--n 300] [--blocks 4] [--warm 100]
 *
 * An experiment for one change at a time (results go in bench/MICRO.md); the full benchmark
 * (`npm run bench`) stays the measure of record.
 */
import { parseArgs } from 'node:util';
import { BenchEnv } from './lib/env';
import { installHubLogCapture } from './lib/hublog';
import { readCpuTimes } from './lib/proc';
import { singleChanges } from './lib/single-change';
import { median, percentile } from './lib/stats';

const { values: args } = parseArgs({
  options: {
    baseline: { type: 'string', default: 'HEAD' },
    n: { type: 'string', default: '300' },
    blocks: { type: 'string', default: '4' },
    warm: { type: 'string', default: '100' },
  },
});
const perBlock = Number(args.n);
const blocks = Number(args.blocks);
const warm = Number(args.warm);
if (![perBlock, blocks, warm].every((v) => Number.isInteger(v) && v > 0)) throw new Error('--n, --blocks and --warm take positive integers');

interface Tree {
  label: string;
  env: BenchEnv;
  change(id: string): Promise<number>;
  cpu(): number;
}

async function open(label: string, commit: string | null): Promise<Tree> {
  const env = await BenchEnv.start({}, { commit });
  const changes = await singleChanges(env, `ab-${label}`);
  return {
    label,
    env,
    change: (id) => changes.change(id),
    cpu() {
      const t = readCpuTimes(env.workerdPid);
      return t.user + t.system;
    },
  };
}

const fmt = (ms: number) => `${ms.toFixed(3)} ms`;

async function main(): Promise<void> {
  installHubLogCapture();
  const base = await open('baseline', args.baseline);
  const work = await open('working', null);
  const trees = [base, work];
  try {
    console.log(`baseline: ${base.env.source.label}\nworking tree: ${work.env.source.label}`);
    for (let i = 0; i < warm; i++) for (const t of trees) await t.change(`warm-${i}`);
    const all = new Map(trees.map((t) => [t, [] as number[]]));
    const cpuAll = new Map(trees.map((t) => [t, 0]));
    const ratios: number[] = [];
    for (let b = 0; b < blocks; b++) {
      const lat = new Map(trees.map((t) => [t, [] as number[]]));
      const cpu = new Map(trees.map((t) => [t, 0]));
      for (let i = 0; i < perBlock; i++) {
        const order = i % 2 === 0 ? trees : [...trees].reverse();
        for (const t of order) {
          const c0 = t.cpu();
          lat.get(t)?.push(await t.change(`b${b}-${i}`));
          // The operator's ack follows 50 ms after its cursor moves: counted with the next change.
          cpu.set(t, (cpu.get(t) ?? 0) + t.cpu() - c0);
        }
      }
      const m = trees.map((t) => median(lat.get(t) ?? []));
      ratios.push((m[1] as number) / (m[0] as number));
      console.log(
        `block ${b + 1}: ${trees.map((t, k) => `${t.label} ${fmt(m[k] as number)} (cpu ${fmt((1000 * (cpu.get(t) ?? 0)) / perBlock)})`).join(', ')}, working/baseline ${(ratios[b] as number).toFixed(3)}`,
      );
      for (const t of trees) {
        all.get(t)?.push(...(lat.get(t) ?? []));
        cpuAll.set(t, (cpuAll.get(t) ?? 0) + (cpu.get(t) ?? 0));
      }
    }
    const n = perBlock * blocks;
    console.log(`\n| tree | median | p90 | workerd CPU per change |\n|---|---:|---:|---:|`);
    for (const t of trees) {
      const l = all.get(t) ?? [];
      console.log(`| ${t.label} | ${fmt(median(l))} | ${fmt(percentile(l, 90))} | ${fmt((1000 * (cpuAll.get(t) ?? 0)) / n)} |`);
    }
    const mb = median(all.get(base) ?? []);
    const mw = median(all.get(work) ?? []);
    console.log(
      `\nworking / baseline: median ${(mw / mb).toFixed(3)} (per block ${ratios.map((r) => r.toFixed(3)).join(', ')}), CPU ${((cpuAll.get(work) ?? 0) / (cpuAll.get(base) ?? 1)).toFixed(3)}; ${n} changes each`,
    );
  } finally {
    await Promise.all(trees.map((t) => t.env.stop()));
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
