/**
 * An operator process for the restart-in-the-middle-of-a-snapshot test (test/e2e/prune-restart):
 * the SDK with its file stores, and an "application" whose desired state is a directory with one
 * file per deployment (standing in for the cluster's CRDs: it outlives the process). It reports
 * on stdout, one JSON object per line, so the test can kill it at a chosen moment:
 * `{"event":"applied","count":N}` every 25 applied frames, `{"event":"welcome",...}`,
 * `{"event":"pruned","kept":N,"removed":[...]}`, `{"event":"hello","lossy":…}` for each hello sent.
 *
 *   node --import tsx test/e2e/support/snapshot-operator.ts '<json options>'
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { OperatorClient } from '../../../src/operator/client';
import { openFileStores } from '../../../src/operator/file-stores';
import { applied } from '../../../src/operator/handlers';
import { jsonLogger } from '../../../src/operator/logger';

interface Options {
  hubUrl: string;
  token: string;
  cluster: string;
  /** Holds `sdk/` (cursor record and outbound log) and `app/` (the application's deployments). */
  stateDir: string;
  /** Time each desired frame takes to apply, so a snapshot lasts long enough to be interrupted. */
  applyDelayMs: number;
}

const opts = JSON.parse(process.argv[2] ?? '{}') as Options;
const appDir = path.join(opts.stateDir, 'app');
mkdirSync(appDir, { recursive: true });
const say = (o: Record<string, unknown>) => process.stdout.write(JSON.stringify(o) + '\n');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let count = 0;
const stores = await openFileStores(path.join(opts.stateDir, 'sdk'));
const client = new OperatorClient({
  url: opts.hubUrl,
  token: opts.token,
  clusterId: opts.cluster,
  operatorVersion: 'dev',
  ...stores,
  // Warnings to stderr as usual; each hello the SDK sends is reported as an event (what it asked).
  logger: jsonLogger({
    level: 'info',
    write: (line) => {
      const o = JSON.parse(line) as { level: string; msg: string; session?: unknown; lossy?: unknown; resume_from?: unknown };
      if (o.msg === 'connected; hello') say({ event: 'hello', session: o.session ?? null, lossy: o.lossy, resume_from: o.resume_from ?? null });
      else if (o.level === 'warn' || o.level === 'error') process.stderr.write(line + '\n');
    },
  }),
  backoff: { baseMs: 100, capMs: 800 },
  ackDelayMs: 20,
  snapshot: () => ({ nodes: [], devices: [], deployments: [] }),
  handlers: {
    async desired(d) {
      if (opts.applyDelayMs > 0) await sleep(opts.applyDelayMs);
      const file = path.join(appDir, d.deployment_id);
      if (d.deleted) rmSync(file, { force: true });
      else writeFileSync(file, JSON.stringify({ revision: d.revision }));
      if (++count % 25 === 0) say({ event: 'applied', count });
      return applied();
    },
    pruneDesired(keep) {
      const removed = readdirSync(appDir).filter((id) => !keep.has(id));
      for (const id of removed) rmSync(path.join(appDir, id), { force: true });
      say({ event: 'pruned', kept: keep.size, removed });
      return applied();
    },
    operation: () => ({ outcome: 'succeeded' }),
  },
});
client.on('welcome', (w) => say({ event: 'welcome', session: w.sessionId, fresh: w.fresh }));
client.on('refused', (r) => say({ event: 'refused', ...r }));
await client.start();
say({ event: 'started' });
