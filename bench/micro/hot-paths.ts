/**
 * Micro benchmark of three per-frame paths of the hub (bench/micro/hot-cases.ts), each against
 * the same code as committed at a baseline ref: not a copy kept in the tree, but the ref's src/
 * extracted with `git archive` and loaded beside the working tree's, side by side in one run,
 * in Node and inside workerd (a worker generated next to the extracted tree and started with
 * wrangler's unstable_startWorker):
 *
 *   npx tsx bench/micro/hot-paths.ts [--baseline f1c766c] [--runs 7] [--ms 150] [--no-workerd]
 *
 * Pure JavaScript; the runtime's own costs (timers, SQLite, sockets) are not in it. Results go
 * in bench/MICRO.md with the command.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { unstable_startWorker } from 'wrangler';
import { hotSuite, type HotRow, type Tree } from './hot-cases';
import { NO_ENV_FILES } from '../../scripts/lib/no-env-files';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const { values: args } = parseArgs({
  options: {
    baseline: { type: 'string', default: 'f1c766c' },
    runs: { type: 'string', default: '7' },
    ms: { type: 'string', default: '150' },
    'no-workerd': { type: 'boolean', default: false },
  },
});
const runs = Number(args.runs);
const ms = Number(args.ms);

const MODULES = {
  schedule: 'hub/session/ingest-schedule',
  batch: 'hub/session/ingest-batch',
  outgoing: 'hub/session/outgoing',
  protocol: 'protocol/index',
  guard: 'hub/admin/body-guard',
} as const;

async function load(srcDir: string): Promise<Tree> {
  const entries = await Promise.all(
    Object.entries(MODULES).map(async ([k, p]) => [k, (await import(pathToFileURL(path.join(srcDir, `${p}.ts`)).href)) as unknown] as const),
  );
  return Object.fromEntries(entries) as unknown as Tree;
}

/** The baseline's src/ in a temporary directory, its bare imports resolved from this checkout. */
function extract(ref: string): { dir: string; sha: string } {
  const sha = execFileSync('git', ['-C', ROOT, 'rev-parse', '--short=12', ref], { encoding: 'utf8' }).trim();
  const dir = mkdtempSync(path.join(tmpdir(), 'wingsmith-micro-baseline-'));
  execFileSync('sh', ['-c', 'git -C "$1" archive "$2" src | tar -x -C "$3"', 'sh', ROOT, sha, dir]);
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  return { dir, sha };
}

/** Both trees inside workerd: a worker written next to the baseline imports each by path. */
async function inWorkerd(dir: string): Promise<HotRow[]> {
  const imports = (tree: string, root: string) =>
    Object.entries(MODULES)
      .map(([k, p]) => `import * as ${tree}_${k} from ${JSON.stringify(path.join(root, p))};`)
      .join('\n');
  const tree = (name: string) => `{ ${Object.keys(MODULES).map((k) => `${k}: ${name}_${k}`).join(', ')} }`;
  writeFileSync(
    path.join(dir, 'worker.ts'),
    `${imports('before', path.join(dir, 'src'))}
${imports('after', path.join(ROOT, 'src'))}
import { hotSuite } from ${JSON.stringify(path.join(ROOT, 'bench/micro/hot-cases'))};
export default {
  fetch(request: Request): Response {
    const u = new URL(request.url);
    const before = ${tree('before')} as never;
    const after = ${tree('after')} as never;
    return Response.json(hotSuite(before, after, Number(u.searchParams.get('runs')), Number(u.searchParams.get('ms'))));
  },
};
`,
  );
  // The hub's runtime settings (bench/micro/wrangler.toml), no bindings.
  writeFileSync(path.join(dir, 'wrangler.toml'), 'name = "wingsmith-micro-hot"\nmain = "worker.ts"\ncompatibility_date = "2026-04-01"\ncompatibility_flags = ["nodejs_compat"]\n');
  const worker = await unstable_startWorker({
    config: path.join(dir, 'wrangler.toml'),
    sendMetrics: false,
    envFiles: NO_ENV_FILES,
    dev: { server: { hostname: '127.0.0.1', port: 0 }, inspector: false, watch: false, logLevel: 'warn' },
  });
  try {
    const url = await worker.url;
    const r = await fetch(`${url.origin}/?runs=${runs}&ms=${ms}`);
    if (!r.ok) throw new Error(`workerd: ${r.status} ${await r.text()}`);
    return (await r.json()) as HotRow[];
  } finally {
    await worker.dispose();
  }
}

async function main(): Promise<void> {
  const base = extract(args.baseline as string);
  try {
    const results: [string, HotRow[]][] = [['Node', hotSuite(await load(path.join(base.dir, 'src')), await load(path.join(ROOT, 'src')), runs, ms)]];
    if (!args['no-workerd']) results.push(['workerd', await inWorkerd(base.dir)]);
    const f0 = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
    console.log(`Baseline: ${base.sha} (git archive); after: the working tree. Node ${process.version}; median of ${runs} runs of ≥ ${ms} ms each.\n`);
    console.log(`| path | ${results.map(([rt]) => `${rt}: before | ${rt}: after | ${rt}: after / before`).join(' | ')} |`);
    console.log(`|---|${results.map(() => '---:|---:|---:').join('|')}|`);
    const first = results[0]?.[1] ?? [];
    first.forEach((r, i) => {
      console.log(`| ${r.path} | ${results.map(([, rows]) => { const x = rows[i] as HotRow; return `${f0(x.before)} ns | ${f0(x.after)} ns | ${(x.after / x.before).toFixed(2)}×`; }).join(' | ')} |`);
    });
  } finally {
    rmSync(base.dir, { recursive: true, force: true });
  }
}

await main();
