/**
 * `npm run check:deploy` (run by CI): every deployment in wrangler.toml, the default one and each
 * region, builds as `wrangler deploy --dry-run --env <name>` would upload it, its bundle is within
 * the Workers size limit, and the regions' environments are consistent (scripts/lib/deploy-config.ts).
 *
 * Nothing is uploaded and no account is needed. The dry runs go two at a time (CI has 2 cores);
 * each takes about 1.5 s here.
 */
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { experimental_readRawConfig } from 'wrangler';
import { checkDeployConfig, type Target } from './lib/deploy-config';
import { REPO_ROOT } from './lib/start-state';

/**
 * The Workers limit on a Worker's size after compression: 3 MB on the Free plan, 10 MB on Paid
 * (Cloudflare's limits page). The stricter one, so the hub deploys on either.
 */
const LIMIT_GZIP_BYTES = 3 * 1024 * 1024;

const CONFIG = path.join(REPO_ROOT, 'wrangler.toml');
const wranglerBin = path.join(path.dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');

interface Built {
  target: Target;
  ok: boolean;
  output: string;
  rawBytes: number;
  gzipBytes: number;
}

function run(args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [wranglerBin, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: 'true', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d));
    child.stderr.on('data', (d: Buffer) => (output += d));
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** What would be uploaded: the bundle's modules (source maps are not part of the Worker's size). */
function bundleSize(dir: string): { rawBytes: number; gzipBytes: number } {
  const files = readdirSync(dir).filter((f) => !f.endsWith('.map') && f !== 'README.md' && statSync(path.join(dir, f)).isFile());
  const bytes = Buffer.concat(files.map((f) => readFileSync(path.join(dir, f))));
  return { rawBytes: bytes.length, gzipBytes: gzipSync(bytes).length };
}

async function build(target: Target, outRoot: string): Promise<Built> {
  const outdir = path.join(outRoot, target.env || 'default');
  // --env="" is how wrangler names the top level when environments exist.
  const { code, output } = await run(['deploy', '--dry-run', `--env=${target.env}`, '--outdir', outdir, '--config', CONFIG]);
  if (code !== 0) return { target, ok: false, output, rawBytes: 0, gzipBytes: 0 };
  return { target, ok: true, output, ...bundleSize(outdir) };
}

const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;

async function main(): Promise<number> {
  const started = Date.now();
  const { targets, problems } = checkDeployConfig(experimental_readRawConfig({ config: CONFIG }).rawConfig);
  for (const p of problems) console.error(`check-deploy: ${p}`);

  const outRoot = await mkdtemp(path.join(tmpdir(), 'wingsmith-deploy-check-'));
  const built: Built[] = [];
  try {
    for (let i = 0; i < targets.length; i += 2) built.push(...(await Promise.all(targets.slice(i, i + 2).map((t) => build(t, outRoot)))));
  } finally {
    await rm(outRoot, { recursive: true, force: true });
  }

  let failed = problems.length > 0;
  for (const b of built) {
    const label = `${b.target.env || '(default)'} → ${b.target.workerName}`;
    if (!b.ok) {
      failed = true;
      console.error(`check-deploy: ${label}: wrangler deploy --dry-run failed\n${b.output}`);
      continue;
    }
    const over = b.gzipBytes > LIMIT_GZIP_BYTES;
    if (over) failed = true;
    console.log(
      `check-deploy: ${label}: ${kib(b.rawBytes)}, ${kib(b.gzipBytes)} gzip ` +
        `(${((b.gzipBytes / LIMIT_GZIP_BYTES) * 100).toFixed(0)}% of the ${kib(LIMIT_GZIP_BYTES)} limit)${over ? '  OVER THE LIMIT' : ''}`,
    );
  }
  console.log(`check-deploy: ${failed ? 'FAILED' : 'ok'}: ${built.length} deployments in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return failed ? 1 : 0;
}

process.exitCode = await main();
