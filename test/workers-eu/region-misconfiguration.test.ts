/**
 * A region deployed without what it needs to place its objects or reach its registry fails every
 * request as a configuration error (README "Configuration"): 503 `unconfigured` naming the var,
 * one `error` line per isolate, never a database outage. Before (a regions review), a jurisdiction
 * the runtime refuses, or a missing DATABASE_URL secret, surfaced at each route's first statement:
 * /healthz said `database: unavailable`, the connect route told operators the registry was
 * unavailable and to retry, and the log called it a database outage at warning level.
 *
 * The runtime's refusal is real here: local workerd has no jurisdictions, and without the
 * emulation `npm start` sets (src/hub/region.ts) the eu deployment's jurisdiction cannot be had.
 * Cloudflare refusing a jurisdiction it does not know is stood in for by a binding whose
 * jurisdiction() throws, the only thing the hub can see of it.
 */
import { createExecutionContext } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { hubApp } from '../../src/hub/app';
import type { HubEnv } from '../../src/hub/env';
import { hubEnv, newCluster } from '../workers/support/peer';

const app = hubApp();

interface Answer {
  path: string;
  status: number;
  error: { code: string; field?: string; message: string } | undefined;
}

/** Every kind of route, as an admin, a load balancer and an operator call it, with `env` as the Worker's bindings. */
async function everyRoute(env: HubEnv, token: string): Promise<{ answers: Answer[]; lines: string[] }> {
  const lines: string[] = [];
  const spy = vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void lines.push(a.map(String).join(' ')));
  const warned = vi.spyOn(console, 'warn').mockImplementation((...a: unknown[]) => void lines.push(`WARN ${a.map(String).join(' ')}`));
  const answers: Answer[] = [];
  try {
    for (const path of ['/healthz', '/admin/clusters', '/v1/connect', '/']) {
      const connect = path === '/v1/connect';
      const req = new Request(`http://hub.test${path}`, {
        headers: { authorization: `Bearer ${connect ? token : hubEnv.ADMIN_TOKEN}`, ...(connect ? { upgrade: 'websocket' } : {}) },
      });
      const res = await app.fetch(req, env, createExecutionContext());
      const json = res.headers.get('content-type')?.startsWith('application/json');
      const body = json ? ((await res.json()) as { error?: Answer['error'] }) : {};
      res.webSocket?.accept();
      res.webSocket?.close();
      answers.push({ path, status: res.status, error: body.error });
    }
  } finally {
    spy.mockRestore();
    warned.mockRestore();
  }
  return { answers, lines };
}

/** `logged`: the isolate has not logged this problem yet (it logs each one once). */
function expectUnconfigured(result: { answers: Answer[]; lines: string[] }, variable: string, message: RegExp, logged = 1): void {
  for (const a of result.answers) {
    expect(a).toEqual({ path: a.path, status: 503, error: { code: 'unconfigured', field: variable, message: expect.stringMatching(message) as unknown as string } });
  }
  expect(result.lines.filter((l) => l.includes('invalid hub configuration'))).toHaveLength(logged);
  expect(result.lines.filter((l) => l.includes('database unavailable'))).toEqual([]);
}

describe('a region that cannot place its objects or reach its registry', () => {
  it('a jurisdiction the runtime does not have (local workerd, no emulation): 503 unconfigured naming HUB_JURISDICTION on every route, not a database outage', async () => {
    const c = await newCluster('misconf');
    const result = await everyRoute({ ...hubEnv, HUB_JURISDICTION_EMULATION: '' } as HubEnv, c.token);
    expectUnconfigured(result, 'HUB_JURISDICTION', /HUB_JURISDICTION.*no Durable Object jurisdictions/);
  });

  it('a jurisdiction the runtime refuses (a binding whose jurisdiction() throws): the same, with the runtime\'s reason', async () => {
    const c = await newCluster('misconf');
    const refusing = (real: DurableObjectNamespace) =>
      ({
        idFromName: (n: string) => real.idFromName(n),
        get: (id: DurableObjectId, o?: DurableObjectNamespaceGetDurableObjectOptions) => real.get(id, o),
        jurisdiction: () => {
          throw new TypeError('Unknown jurisdiction: eu');
        },
      }) as unknown as DurableObjectNamespace;
    const result = await everyRoute({ ...hubEnv, SESSIONS: refusing(hubEnv.SESSIONS), DB_GATEWAY: refusing(hubEnv.DB_GATEWAY) }, c.token);
    expectUnconfigured(result, 'HUB_JURISDICTION', /runtime refuses Durable Object jurisdiction eu: Unknown jurisdiction/);
  });

  it('a region deployed without its DATABASE_URL secret (unset or blank): 503 unconfigured naming DATABASE_URL on every route', async () => {
    const c = await newCluster('misconf');
    const { DATABASE_URL: _, ...unset } = hubEnv;
    expectUnconfigured(await everyRoute(unset as HubEnv, c.token), 'DATABASE_URL', /DATABASE_URL: not set/);
    expectUnconfigured(await everyRoute({ ...hubEnv, DATABASE_URL: ' ' }, c.token), 'DATABASE_URL', /DATABASE_URL: not set/, 0);
  });

  it('control: the eu configuration as deployed (emulated locally) serves all of them', async () => {
    const c = await newCluster('misconf');
    const { answers } = await everyRoute(hubEnv, c.token);
    expect(answers.map((a) => [a.path, a.status])).toEqual([
      ['/healthz', 200],
      ['/admin/clusters', 200],
      ['/v1/connect', 101],
      ['/', 200],
    ]);
  });
});
