/**
 * `npm run fleet` against a real regional hub (wrangler.toml [env.eu] in workerd, Postgres):
 * the clusters its admin API lists, with region and placement, and the problems a platform team
 * must hear about. (One hub here; every region being its own deployment and database, a second
 * one would show nothing a mislabelled entry does not.)
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { fetchRegion, fleetProblems } from '../../scripts/lib/fleet';
import { buildFrame } from '../../src/protocol';
import { startHub, type Hub } from '../e2e/support/worker';
import { uniqueName } from '../support/peer-core';
import { FAST_TIMERS } from './support/hub';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
let hub: Hub;

beforeAll(async () => {
  hub = await startHub({ env: 'eu', vars: { ...FAST_TIMERS, HUB_JURISDICTION_EMULATION: '1' } });
}, 60_000);
afterAll(async () => hub?.stop(), 60_000);

async function register(name: string, location_hint?: string): Promise<{ uid: string; token: string }> {
  const res = await fetch(`${hub.url}/admin/clusters`, {
    method: 'POST',
    headers: { authorization: `Bearer ${hub.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, ...(location_hint ? { location_hint } : {}) }),
  });
  expect(res.status).toBe(201);
  const body = (await res.json()) as { uid: string; enrollment_token: string };
  return { uid: body.uid, token: body.enrollment_token };
}

/** An operator that says hello and stays connected until closed. */
async function online(token: string, cluster: string): Promise<WebSocket> {
  const ws = new WebSocket(`${hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
  const welcomed = new Promise<void>((resolve, reject) => {
    ws.on('message', (d) => (JSON.parse(String(d)).type === 'welcome' ? resolve() : undefined));
    ws.once('close', (code) => reject(new Error(`closed ${code}`)));
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  ws.send(buildFrame({ type: 'hello', payload: { cluster_id: cluster, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false } }));
  await welcomed;
  return ws;
}

function fleetCli(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/fleet.ts', ...args], { cwd: REPO, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('npm run fleet', () => {
  it('lists a region\'s clusters with their region, state, hint and jurisdiction; the endpoint confirms its region', async () => {
    const name = uniqueName('fleet');
    const c = await register(name, 'weur');
    const ws = await online(c.token, name);
    try {
      const report = await fetchRegion({ region: 'eu', url: hub.url, token: hub.adminToken });
      expect(report.error).toBeNull();
      expect(report.reportedRegion).toBe('eu');
      expect(report.clusters.find((x) => x.uid === c.uid)).toMatchObject({
        region: 'eu',
        name,
        connected: true,
        location_hint: 'weur',
        jurisdiction: 'eu',
        disabled: false,
      });
      expect(fleetProblems([report])).toEqual([]);
    } finally {
      ws.close(1000);
    }
  });

  it('reports an endpoint listed under the wrong region, a region it cannot reach or is refused by, and a name registered twice', async () => {
    const name = uniqueName('fleet');
    await register(name);
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));

    const reports = await Promise.all([
      fetchRegion({ region: 'eu', url: hub.url, token: hub.adminToken }),
      fetchRegion({ region: 'us', url: hub.url, token: hub.adminToken }),
      fetchRegion({ region: 'apac', url: `http://127.0.0.1:${port}`, token: 'x' }),
      fetchRegion({ region: 'oc', url: hub.url, token: 'wrong-token' }),
    ]);
    const problems = fleetProblems(reports);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^us \(.*\): that hub serves region eu, not us/),
        expect.stringMatching(/^apac \(.*\): unreachable or refused/),
        expect.stringMatching(/^oc \(.*\): unreachable or refused: .*HTTP 401/),
        expect.stringMatching(new RegExp(`^cluster ${name} is enabled in 2 regions \\(eu, us\\)`)),
      ]),
    );
  });

  it('as a command: the table on stdout, exit 0; problems on stderr, exit 1', async () => {
    const name = uniqueName('fleet');
    await register(name, 'eeur');
    const ok = await fleetCli(['--hub', `eu=${hub.url}`], { WINGSMITH_ADMIN_TOKEN_EU: hub.adminToken });
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(new RegExp(`^eu\\s+${name}\\s+\\S+\\s+offline\\s+eeur\\s+eu$`, 'm'));
    const bad = await fleetCli(['--hub', `eu=${hub.url}`, '--hub', `us=${hub.url}`], { WINGSMITH_ADMIN_TOKEN: hub.adminToken });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/fleet: us \(.*\): that hub serves region eu, not us/);
  }, 30_000);
});
