/**
 * One cluster with a connected raw operator on a started hub, and single desired changes to it:
 * admin PUT → the deployment.desired frame at the operator (bench/desired-ab.ts,
 * bench/desired-profile.ts).
 */
import type { BenchCluster, BenchEnv } from './env';
import { RawOperator } from './operator';
import { DESIRED_BODY } from './payloads';

export interface SingleChanges {
  /**
   * PUT one new deployment and wait for both its answer and its frame; resolves to the ms from
   * the PUT's start to the frame's arrival, as the full benchmark's single change measures (the
   * frame leaves before the answer: the later of the two would be the answer's time).
   */
  change(deploymentId: string): Promise<number>;
}

export async function singleChanges(env: BenchEnv, label: string): Promise<SingleChanges> {
  const [c] = (await env.createClusters(1, label)) as [BenchCluster];
  const op = await RawOperator.connect(env.wsUrl, c.token);
  const end = op.next((f) => f.type === 'stream.end');
  await op.hello({ cluster_id: c.name });
  await end;
  const waiting = new Map<string, () => void>();
  op.onFrame((f) => {
    if (f.type !== 'deployment.desired') return;
    const id = String(f.payload.deployment_id);
    waiting.get(id)?.();
    waiting.delete(id);
  });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${env.vars.ADMIN_TOKEN}` };
  const body = JSON.stringify(DESIRED_BODY);
  return {
    async change(id) {
      const arrived = new Promise<number>((resolve) => waiting.set(id, () => resolve(performance.now())));
      const t0 = performance.now();
      const res = await fetch(`${env.hubUrl}/admin/clusters/${c.uid}/deployments/${id}`, { method: 'PUT', headers, body });
      await res.text();
      if (res.status !== 200) throw new Error(`${label}: PUT ${res.status}`);
      // The frame's arrival, not the later of it and the answer (the next change waits for both).
      return (await arrived) - t0;
    },
  };
}
