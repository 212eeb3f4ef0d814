/**
 * Restart in the middle of the hub's snapshot (issue 11 item 5). An operator process is killed
 * (SIGKILL: no stop, nothing more saved) while it is applying a 1,000-deployment snapshot from
 * the real hub. Its application state (a directory, standing in for the cluster's CRDs) also
 * holds deployments the hub does not have; only a prune against a complete hub snapshot removes
 * those. The half-received snapshot can never be pruned against, so the restarted process must
 * not resume into its tail: its record says a hub snapshot was open, its hello says lossy, and
 * the fresh session's whole snapshot is pruned against. Afterwards the application holds exactly
 * the hub's set.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { until, useE2E } from './support/e2e';
import { desiredBody } from './support/plane';

const e = useE2E();
const SCRIPT = fileURLToPath(new URL('./support/snapshot-operator.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEPLOYMENTS = 1_000;
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterAll(async () => {
  // Wait for each child to exit before removing its directory: a still-writing child fails the rm.
  await Promise.all(
    children
      .filter((c) => c.exitCode === null && c.signalCode === null)
      .map((c) => new Promise<void>((r) => (c.once('exit', () => r()), c.kill('SIGKILL')))),
  );
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

interface Child {
  proc: ChildProcess;
  events: Record<string, unknown>[];
  exited: Promise<void>;
}

function startOperator(options: Record<string, unknown>): Child {
  const proc = spawn(process.execPath, ['--import', 'tsx', SCRIPT, JSON.stringify(options)], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(proc);
  const events: Record<string, unknown>[] = [];
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    try {
      events.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // not ours
    }
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString('utf8')).slice(-4_000);
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.once('exit', (code, signal) => {
    if (code !== null && code !== 0) process.stderr.write(`snapshot operator exited ${code}: ${stderr}\n`);
    void signal;
  });
  return { proc, events, exited };
}

const applied = (c: Child) => Math.max(0, ...c.events.filter((x) => x.event === 'applied').map((x) => Number(x.count)));

async function putAll(cluster: string, ids: string[], parallel = 8): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < ids.length) {
        const id = ids[next++] as string;
        await e.admin.putDesired(cluster, id, desiredBody({ min_replicas: 1, max_replicas: 1 }));
      }
    }),
  );
}

describe('restart in the middle of a hub snapshot', () => {
  it(`a process killed while applying a ${DEPLOYMENTS}-deployment snapshot comes back lossy, and the application ends with exactly the hub's set`, async () => {
    const reg = await e.register('prune-restart');
    const ids = Array.from({ length: DEPLOYMENTS }, (_, i) => `d${String(i).padStart(4, '0')}`);
    await putAll(reg.name, ids);

    const stateDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-prune-restart-'));
    dirs.push(stateDir);
    const appDir = path.join(stateDir, 'app');
    await mkdir(appDir, { recursive: true });
    // Deployments the application holds that the hub does not: only a prune removes them.
    for (const ghost of ['ghost-1', 'ghost-2']) await writeFile(path.join(appDir, ghost), '{}');
    const base = { hubUrl: e.hub.url, token: reg.token, cluster: reg.name, stateDir };

    const first = startOperator({ ...base, applyDelayMs: 4 });
    const cursorFile = path.join(stateDir, 'sdk', 'cursor.json');
    const record = async () => JSON.parse(await readFile(cursorFile, 'utf8')) as { cursor: number; sessionId: string; hubSnapshotOpen?: boolean };
    // Well inside the snapshot, with a durable cursor past its begin: a resume would replay only its tail.
    await until('the first process to be a third of the way through the snapshot', async () => applied(first) >= 300 && (await record()).cursor >= 100, 60_000, 20);
    first.proc.kill('SIGKILL');
    await first.exited;
    const atKill = await record();
    expect(applied(first)).toBeLessThan(DEPLOYMENTS);
    expect(atKill.hubSnapshotOpen).toBe(true);
    const heldAtKill = await readdir(appDir);
    expect(heldAtKill.length).toBeLessThan(DEPLOYMENTS + 2);
    expect(heldAtKill).toContain('ghost-1');

    // While no operator runs, the plane withdraws a few deployments (some already applied).
    const withdrawn = ids.slice(0, 5);
    for (const id of withdrawn) await e.admin.deleteDesired(reg.name, id);
    const hubSet = (
      await e.query<{ deployment_id: string }>('select deployment_id from desired_deployments where cluster_uid = $1 and not deleted order by 1', [reg.uid])
    ).map((r) => r.deployment_id);
    expect(hubSet).toEqual(ids.slice(5));

    const second = startOperator({ ...base, applyDelayMs: 0 });
    await until(
      "the application to hold exactly the hub's set",
      async () => JSON.stringify((await readdir(appDir)).sort()) === JSON.stringify(hubSet),
      60_000,
      100,
    );
    // The restart said it cannot serve as a resume base (its record had a hub snapshot open), was
    // given a fresh session, and pruned against the whole new snapshot.
    expect(second.events.find((x) => x.event === 'hello')).toMatchObject({ lossy: true });
    expect(second.events.find((x) => x.event === 'welcome')).toMatchObject({ fresh: true });
    expect(second.events.find((x) => x.event === 'pruned')).toMatchObject({ kept: hubSet.length });
    // Its record names the new session once a save has followed the welcome: the application can
    // hold the whole set before that save is done (one CI run read the record a moment early).
    await until('the record to name the fresh session', async () => (await record()).sessionId !== atKill.sessionId, 10_000, 50);
    second.proc.kill('SIGKILL');
    await second.exited;
  }, 180_000);
});
