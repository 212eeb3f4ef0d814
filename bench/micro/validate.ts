/**
 * Micro benchmark of the ingest hot path (not part of `npm run bench`; results in bench/MICRO.md):
 *
 *   npx tsx bench/micro/validate.ts [--runs 7] [--ms 150] [--pg-reps 30] [--no-workerd] [--no-pg]
 *
 * Side by side in one run, in Node and inside workerd (a tiny worker started with wrangler's
 * unstable_startWorker, where zod has no eval fast path): ns per frame of zod against the
 * hand-written validator for every hot operator type, and of a whole readFrame before and after;
 * µs per 2,000-frame device batch for building it and serializing its parameters, before and
 * after. Then, with a Postgres at DATABASE_URL or 127.0.0.1:5432, the ingest statement itself
 * three ways (before, one JSON document, after) on a fresh database it drops at the end.
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { unstable_startWorker } from 'wrangler';
import { batchSuite, partsSuite, validateSuite, type BatchRow, type ValidateRow } from './cases';
import { statementSuite } from './statement';
import { NO_ENV_FILES } from '../../scripts/lib/no-env-files';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '7' },
    ms: { type: 'string', default: '150' },
    'pg-reps': { type: 'string', default: '30' },
    'no-workerd': { type: 'boolean', default: false },
    'no-pg': { type: 'boolean', default: false },
  },
});
const runs = Number(args.runs);
const ms = Number(args.ms);

type Validate = ReturnType<typeof validateSuite>;
type Batch = ReturnType<typeof batchSuite>;
type Parts = ReturnType<typeof partsSuite>;

const f0 = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
const f1 = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: n < 10 ? 2 : 1 });
const x = (before: number, after: number) => `${(before / after).toFixed(1)}×`;

function validateTable(results: [string, Validate][]): string {
  const head = `| type | ${results.map(([rt]) => `${rt}: zod | ${rt}: fast | ${rt}: speed-up`).join(' | ')} |`;
  const rule = `|---|${results.map(() => '---:|---:|---:').join('|')}|`;
  const rowsOf = (pick: (v: Validate) => ValidateRow[]) =>
    pick(results[0]![1]).map((r, i) => `| ${r.type} | ${results.map(([, v]) => { const row = pick(v)[i]!; return `${f0(row.zod)} | ${f0(row.fast)} | ${x(row.zod, row.fast)}`; }).join(' | ')} |`);
  return [head, rule, ...rowsOf((v) => v.payloads), ...rowsOf((v) => [v.frames]).map((l) => l.replace(/^\| (.*?) \|/, '| **$1** (before → after) |'))].join('\n');
}

function batchTable(results: [string, Batch][]): string {
  const head = `| step, 2,000 device.observed frames | ${results.map(([rt]) => `${rt}: before | ${rt}: after`).join(' | ')} |`;
  const rule = `|---|${results.map(() => '---:|---:').join('|')}|`;
  const rows = results[0]![1].rows.map((r: BatchRow, i) => `| ${r.step} | ${results.map(([, b]) => `${f0(b.rows[i]!.before)} µs | ${f0(b.rows[i]!.after)} µs`).join(' | ')} |`);
  const bytes = results[0]![1].bytes;
  return [head, rule, ...rows, '', `Parameter bytes per batch: before ${f0(bytes.before)}, after ${f0(bytes.after)} (${((1 - bytes.after / bytes.before) * 100).toFixed(0)}% fewer).`].join('\n');
}

function partsTable(results: [string, Parts][]): string {
  const head = `| one device.observed frame | ${results.map(([rt]) => rt).join(' | ')} |`;
  const rule = `|---|${results.map(() => '---:').join('|')}|`;
  return [head, rule, ...results[0]![1].map((p, i) => `| ${p.part} | ${results.map(([, r]) => `${f0(r[i]!.ns)} ns`).join(' | ')} |`)].join('\n');
}

async function inWorkerd(): Promise<{ validate: Validate; parts: Parts; batch: Batch; userAgent: string | null }> {
  const worker = await unstable_startWorker({
    config: fileURLToPath(new URL('./wrangler.toml', import.meta.url)),
    sendMetrics: false,
    envFiles: NO_ENV_FILES,
    dev: { server: { hostname: '127.0.0.1', port: 0 }, inspector: false, watch: false, logLevel: 'warn' },
  });
  try {
    const url = await worker.url;
    const get = async <T>(suite: string): Promise<T> => {
      const r = await fetch(`${url.origin}/?suite=${suite}&runs=${runs}&ms=${ms}`);
      if (!r.ok) throw new Error(`workerd ${suite}: ${r.status} ${await r.text()}`);
      return (await r.json()) as T;
    };
    const { userAgent } = await get<{ userAgent: string | null }>('probe');
    return { userAgent, validate: await get<Validate>('validate'), parts: await get<Parts>('parts'), batch: await get<Batch>('batch') };
  } finally {
    await worker.dispose();
  }
}

async function main(): Promise<void> {
  process.env.WRANGLER_SEND_METRICS = 'false';
  process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= 'false';
  const started = new Date();
  console.error(`node: validate (runs ${runs} × ≥${ms} ms)…`);
  const validate: [string, Validate][] = [['Node', validateSuite(runs, ms)]];
  const parts: [string, Parts][] = [['Node', partsSuite(runs, ms)]];
  console.error('node: batch…');
  const batch: [string, Batch][] = [['Node', batchSuite(runs, ms)]];
  let ua: string | null = null;
  if (!args['no-workerd']) {
    console.error('workerd: validate and batch…');
    const w = await inWorkerd();
    ua = w.userAgent;
    validate.push(['workerd', w.validate]);
    parts.push(['workerd', w.parts]);
    batch.push(['workerd', w.batch]);
  }
  const out: string[] = [];
  out.push(`Run ${started.toISOString()}; Node ${process.version}${ua ? `; workerd user agent "${ua}" (zod's allowsEval is false there)` : ''}; ${runs} runs of ≥ ${ms} ms per figure, medians.`, '');
  out.push('### Validation, ns per frame', '', validateTable(validate), '');
  out.push('### Where a frame\'s readFrame time goes now, ns per frame', '', partsTable(parts), '');
  out.push('### Batch building and parameters, µs per 2,000-frame batch', '', batchTable(batch), '');
  if (!args['no-pg']) {
    console.error('postgres: statement variants…');
    const pg = await statementSuite(Number(args['pg-reps']));
    out.push(`### The ingest statement, ms per 2,000-device batch (${pg.server}, Neon driver + proxy from Node, prepared, ${args['pg-reps']} runs each, round-robin)`, '');
    out.push('| variant | median | min | max |', '|---|---:|---:|---:|');
    for (const r of pg.results) out.push(`| ${r.variant} | ${f1(r.median)} ms | ${f1(Math.min(...r.ms))} ms | ${f1(Math.max(...r.ms))} ms |`);
    out.push('');
  }
  console.log(out.join('\n'));
}

await main();
