/**
 * `npm start` keeps the demo cluster's token in its state directory with the cluster's
 * `token_issued_at`, and at the next start reuses it while the admin API still reports that same
 * time (scripts/lib/demo-cluster.ts). The time stored must be the one of the write that issued the
 * stored token. Read back by a GET after the create or the rotation, it was the time of whatever
 * rotation had committed by then: a rotation by anyone else in between (an admin rotating the
 * leaked demo token from the dashboard, a second hub on the same database starting) paired the
 * dead token with the live token's time, and every later start reused the dead token, printed it
 * as ready and handed it to the simulator, which was refused 4403 ("enrollment token is not valid")
 * for good, until someone deleted the state file.
 *
 * Here the other rotation is made right after the script's own create or rotate has answered, on
 * real workerd and real Postgres (the script's admin calls go through unchanged; the test only
 * makes its own call at that moment); the next start's token must be one the hub admits.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ensureDemoCluster } from '../../scripts/lib/demo-cluster';
import { statePaths, type StatePaths } from '../../scripts/lib/start-state';
import { uniqueName } from '../support/peer-core';
import { sleep, useHub } from './support/hub';

const h = useHub();
const realFetch = globalThis.fetch;
const dirs: string[] = [];

afterEach(async () => {
  vi.restoreAllMocks();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function stateDir(): Promise<StatePaths> {
  const d = await mkdtemp(path.join(tmpdir(), 'wingsmith-demo-token-'));
  dirs.push(d);
  return statePaths(d);
}

/** Someone else rotates the cluster's token as soon as the script's own `method` call to a path ending in `suffix` has answered. */
function rotateBehind(method: string, suffix: string, cluster: () => string): { rotated: () => boolean } {
  let done = false;
  vi.spyOn(globalThis, 'fetch').mockImplementation(async (input, init) => {
    const res = await realFetch(input, init);
    const url = String(input instanceof Request ? input.url : input);
    if (!done && (init?.method ?? 'GET') === method && new URL(url).pathname.endsWith(suffix)) {
      done = true;
      // Apart from the script's write by more than the registry's millisecond resolution.
      await sleep(5);
      const other = await realFetch(`${h.hub.url}/admin/clusters/${cluster()}/rotate-token`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.hub.adminToken}` },
      });
      expect(other.status).toBe(200);
    }
    return res;
  });
  return { rotated: () => done };
}

/** The token is admitted: a hello on it is welcomed. */
async function admitted(token: string, name: string): Promise<string> {
  const peer = await h.connect(token);
  try {
    peer.send('hello', { cluster_id: name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    const f = await peer.next((x) => x.type === 'welcome' || x.type === 'error', 10_000).catch((err: unknown) => String(err));
    if (typeof f === 'string') return f;
    return f.type === 'welcome' ? 'welcome' : `error: ${JSON.stringify(f.payload)}`;
  } finally {
    peer.close();
  }
}

describe('the demo token npm start keeps', () => {
  it('a rotation by someone else right after the start rotated the token: the next start does not reuse the dead token', async () => {
    const name = uniqueName('demo');
    expect((await h.admin('POST', '/clusters', { name })).status).toBe(201);
    const paths = await stateDir();
    // No stored token: this start rotates, and someone else rotates right behind it.
    const race = rotateBehind('POST', '/rotate-token', () => name);
    const first = await ensureDemoCluster(h.hub.url, h.hub.adminToken, paths, name);
    expect(first.action).toBe('rotated');
    expect(race.rotated()).toBe(true);
    vi.restoreAllMocks();

    const next = await ensureDemoCluster(h.hub.url, h.hub.adminToken, paths, name);
    expect(await admitted(next.token, name), `the next start's token (${next.action}) must be one the hub admits`).toBe('welcome');
  });

  it('a rotation by someone else right after the start created the cluster: the next start does not reuse the dead token', async () => {
    const name = uniqueName('demo');
    const paths = await stateDir();
    const race = rotateBehind('POST', '/admin/clusters', () => name);
    const first = await ensureDemoCluster(h.hub.url, h.hub.adminToken, paths, name);
    expect(first.action).toBe('created');
    expect(race.rotated()).toBe(true);
    vi.restoreAllMocks();

    const next = await ensureDemoCluster(h.hub.url, h.hub.adminToken, paths, name);
    expect(await admitted(next.token, name), `the next start's token (${next.action}) must be one the hub admits`).toBe('welcome');
  });
});
