/**
 * `npm test [-- vitest args]`: the whole suite (unit, workers, e2e). Database selection and
 * lifetime live in test/support/global-setup.ts, so running vitest directly behaves the same.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants as fs, statfsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import path from 'node:path';

/**
 * Where the run keeps its temporary files (every test hub's Durable Object storage, the e2e
 * state directories, the build of the hub): tmpfs when the machine has one with room, unless
 * TMPDIR says otherwise. Local workerd syncs each object's SQLite files and creates several per
 * object; on these machines' disk that was a quarter of the suite's CPU, in the kernel, and the
 * suite ran close to CI's 15 minutes. Postgres stays where it is: the database is the real one.
 */
function runTmpdir(): string | undefined {
  if (process.env.TMPDIR) return undefined;
  try {
    accessSync('/dev/shm', fs.W_OK | fs.X_OK);
    const s = statfsSync('/dev/shm');
    return s.bavail * s.bsize >= 2 * 1024 ** 3 ? '/dev/shm' : undefined;
  } catch {
    return undefined;
  }
}
const tmp = runTmpdir();

// vitest's package exports do not include its CLI file; find it next to package.json.
const vitestCli = path.join(path.dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
const child = spawn(process.execPath, [vitestCli, 'run', ...process.argv.slice(2)], {
  stdio: 'inherit',
  env: {
    ...process.env,
    ...(tmp ? { TMPDIR: tmp } : {}),
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
