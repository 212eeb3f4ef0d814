/**
 * Simulated GPU clusters speaking the operator side of the link, for demos and load.
 *
 *   npm run sim -- --hub http://127.0.0.1:8787 --token wsmet_… [--cluster demo] [--nodes 4 --gpus-per-node 8]
 *   npm run sim -- --hub http://127.0.0.1:8787 --admin-token T --clusters 5 [--name-prefix sim]
 *
 * The first form simulates one registered cluster (`--cluster` is the uid or name its token
 * belongs to; default `demo`). The second registers K new clusters through the admin API and
 * simulates them all. Logs are JSON lines on stderr; a one-line summary per cluster goes to
 * stdout every `--summary-every` seconds. Ctrl-C stops every cluster gracefully (drain, persist,
 * close 1000), so a restart with the same `--state-dir` resumes without a resync.
 *
 * Environment fallbacks: WINGSMITH_HUB, WINGSMITH_TOKEN, WINGSMITH_CLUSTER, ADMIN_TOKEN.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { jsonLogger, type LogLevel } from '../src/operator/logger';
import { createCluster } from '../src/operator/sim/admin';
import { SimulatedCluster } from '../src/operator/sim/cluster';

const USAGE = `usage:
  npm run sim -- --hub URL --token T [--cluster NAME] [options]
  npm run sim -- --hub URL --admin-token A --clusters K [--name-prefix P] [options]
options:
  --nodes N            nodes per cluster (default 4)
  --gpus-per-node G    GPUs per node (default 8)
  --gpu-model M        GPU model (default H100-SXM5-80GB)
  --state-dir DIR      keep cluster state, cursor and outbound log under DIR (default: memory only)
  --chaos-every S      flip a random GPU's health every S seconds (default off)
  --resync-every S     stream a reconciliation snapshot every S seconds (default 900, 0 = off)
  --summary-every S    print a summary line every S seconds (default 10, 0 = off)
  --log-level L        debug | info | warn | error (default info)
  --operator-version V (default dev)`;

const Args = z
  .object({
    hub: z.string().url(),
    token: z.string().min(1).optional(),
    cluster: z.string().min(1).max(253),
    'admin-token': z.string().min(1).optional(),
    clusters: z.coerce.number().int().min(1).max(1000).optional(),
    'name-prefix': z.string().regex(/^[a-z0-9][a-z0-9-]{0,40}$/),
    nodes: z.coerce.number().int().min(0).max(10_000),
    'gpus-per-node': z.coerce.number().int().min(0).max(64),
    'gpu-model': z.string().min(1).max(256),
    'state-dir': z.string().min(1).optional(),
    'chaos-every': z.coerce.number().nonnegative(),
    'resync-every': z.coerce.number().nonnegative(),
    'summary-every': z.coerce.number().nonnegative(),
    'log-level': z.enum(['debug', 'info', 'warn', 'error']),
    'operator-version': z.string().min(1).max(128),
  })
  .refine((a) => a.token !== undefined || (a['admin-token'] !== undefined && a.clusters !== undefined), {
    message: 'give --token (one registered cluster) or --admin-token with --clusters',
  });

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      hub: { type: 'string' },
      token: { type: 'string' },
      cluster: { type: 'string' },
      'admin-token': { type: 'string' },
      clusters: { type: 'string' },
      'name-prefix': { type: 'string' },
      nodes: { type: 'string' },
      'gpus-per-node': { type: 'string' },
      'gpu-model': { type: 'string' },
      'state-dir': { type: 'string' },
      'chaos-every': { type: 'string' },
      'resync-every': { type: 'string' },
      'summary-every': { type: 'string' },
      'log-level': { type: 'string' },
      'operator-version': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const parsed = Args.safeParse({
    hub: values.hub ?? process.env.WINGSMITH_HUB,
    token: values.token ?? process.env.WINGSMITH_TOKEN,
    cluster: values.cluster ?? process.env.WINGSMITH_CLUSTER ?? 'demo',
    'admin-token': values['admin-token'] ?? process.env.ADMIN_TOKEN,
    clusters: values.clusters,
    'name-prefix': values['name-prefix'] ?? 'sim',
    nodes: values.nodes ?? '4',
    'gpus-per-node': values['gpus-per-node'] ?? '8',
    'gpu-model': values['gpu-model'] ?? 'H100-SXM5-80GB',
    'state-dir': values['state-dir'],
    'chaos-every': values['chaos-every'] ?? '0',
    'resync-every': values['resync-every'] ?? '900',
    'summary-every': values['summary-every'] ?? '10',
    'log-level': values['log-level'] ?? 'info',
    'operator-version': values['operator-version'] ?? 'dev',
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    console.error(`sim: ${issue?.path.join('.') || 'arguments'}: ${issue?.message}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const a = parsed.data;
  const logger = jsonLogger({ level: a['log-level'] as LogLevel });

  // Which clusters: the one the token belongs to, or K new ones from the admin API.
  const targets: { clusterId: string; token: string }[] = [];
  if (a.clusters !== undefined && a['admin-token']) {
    const run = Math.random().toString(36).slice(2, 6);
    for (let i = 1; i <= a.clusters; i++) {
      const created = await createCluster(a.hub, a['admin-token'], `${a['name-prefix']}-${run}-${i}`);
      logger.info('registered a simulated cluster', { cluster: created.name, uid: created.uid });
      targets.push({ clusterId: created.name, token: created.enrollment_token });
    }
  } else if (a.token) {
    targets.push({ clusterId: a.cluster, token: a.token });
  }

  const sims: SimulatedCluster[] = [];
  for (const t of targets) {
    const sim = await SimulatedCluster.create({
      hubUrl: a.hub,
      token: t.token,
      clusterId: t.clusterId,
      shape: { nodes: a.nodes, gpusPerNode: a['gpus-per-node'], gpuModel: a['gpu-model'] },
      logger: logger.child({ sim: t.clusterId }),
      operatorVersion: a['operator-version'],
      ...(a['state-dir'] ? { stateDir: a['state-dir'] } : {}),
      chaosEveryMs: a['chaos-every'] * 1000,
      resyncEveryMs: a['resync-every'] * 1000,
    });
    sim.client.on('refused', (r) =>
      logger.error(`hub refused the cluster (check --cluster and --token); ${r.retryInMs === null ? 'it was stopping' : 'still retrying'}`, { cluster: t.clusterId, ...r }),
    );
    await sim.start();
    sims.push(sim);
  }
  console.log(`sim: simulating ${sims.length} cluster(s) against ${a.hub}; Ctrl-C stops them gracefully`);

  let summary: NodeJS.Timeout | null = null;
  if (a['summary-every'] > 0) {
    summary = setInterval(() => {
      for (const s of sims) {
        const m = s.model.summary();
        const st = s.client.stats;
        console.log(
          `${s.client.session.sessionId ? '●' : '○'} ${s.model.shape.name}: ${s.client.state}, ` +
            `${m.nodes} nodes, ${m.gpusInUse}/${m.gpus} GPUs in use, ${m.deployments} deployments, ` +
            `${m.ready}/${m.replicas} replicas ready; sent ${st.framesOut}, unacked ${st.unacked}, queued ${st.queued}`,
        );
      }
    }, a['summary-every'] * 1000);
  }

  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        console.error('sim: second signal, exiting without draining');
        process.exit(1);
      }
      stopping = true;
      console.error(`sim: ${signal}: stopping ${sims.length} cluster(s) gracefully…`);
      if (summary) clearInterval(summary);
      void Promise.allSettled(sims.map((s) => s.stop({ graceful: true }))).then(() => resolve());
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
}

main().catch((err: unknown) => {
  console.error('sim:', err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
