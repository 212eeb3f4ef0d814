/**
 * `npm test [-- vitest args]`: the whole suite (unit, workers, e2e). Database selection and
 * lifetime live in test/support/global-setup.ts, so running vitest directly behaves the same.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import path from 'node:path';

// vitest's package exports do not include its CLI file; find it next to package.json.
const vitestCli = path.join(path.dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
const child = spawn(process.execPath, [vitestCli, 'run', ...process.argv.slice(2)], {
  stdio: 'inherit',
  env: {
    ...process.env,
    WRANGLER_SEND_METRICS: 'false',
    // Offline machines: never try to download the Request.cf object.
    CLOUDFLARE_CF_FETCH_ENABLED: process.env.CLOUDFLARE_CF_FETCH_ENABLED ?? 'false',
  },
});
// Let Ctrl-C reach vitest (same process group) and let it tear the database down itself.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => {
  process.exit(code ?? (signal ? 128 + constants.signals[signal] : 1));
});
