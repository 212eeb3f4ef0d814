import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MAX_GPU_MODELS } from '../../src/hub/db/fleet';
import { canonicalPing } from '../../src/protocol';
import { desired, eventually, node, sleep, useHub, type Peer } from './support/hub';

/**
 * The dashboard's reads: GET /admin/fleet (every cluster at a glance, with fleet totals and each
 * cluster's connect/disconnect history) and GET /admin/clusters/{id}/connections, against real
 * workerd and Postgres; the history comes from the cluster_owners trigger of migration 0010.
 */

const STATIC_DIR = fileURLToPath(new URL('../../src/hub/dashboard/static/', import.meta.url));
const h = useHub();

const gpu = (id: string, nodeId: string, model: string, health: 'healthy' | 'unhealthy' = 'healthy') => ({
  device_id: id,
  node_id: nodeId,
  vendor: 'nvidia',
  model,
  memory_total_mb: 81559,
  health,
  driver_version: '550.54.15',
});

async function applied(peer: Peer, send: (p: Peer) => void): Promise<void> {
  send(peer);
  await peer.ackedThrough(peer.nextSeq - 1);
}

/** The fleet item of one cluster, walking every page. */
async function fleetItem(uid: string, query = ''): Promise<any> {
  let cursor: string | null = null;
  do {
    const r = await h.admin('GET', `/fleet?limit=500${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    const hit = r.json.items.find((i: any) => i.uid === uid);
    if (hit) return hit;
    cursor = r.json.next_cursor;
  } while (cursor !== null);
  return undefined;
}

describe('GET /admin/fleet', () => {
  it('shows a connected cluster with its nodes, GPUs by model, deployments in sync and recent rejections', async () => {
    const c = await h.newCluster('fleet');
    const { peer } = await h.openFresh(c);
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/d-sync`, desired());
    await h.admin('PUT', `/clusters/${c.name}/deployments/d-behind`, desired());
    await applied(peer, (p) => {
      p.send('cluster.observed', { kubernetes_version: '1.30.2', provider: 'eks', region: 'eu-west-1', labels: {} });
      p.send('node.observed', node('n1'));
      p.send('node.observed', node('n2', false));
      p.send('device.observed', gpu('g1', 'n1', 'H100'));
      p.send('device.observed', gpu('g2', 'n1', 'H100', 'unhealthy'));
      p.send('device.observed', gpu('g3', 'n2', 'A100'));
      p.send('deployment.observed', { deployment_id: 'd-sync', observed_revision: put.json.revision, phase: 'ready', ready_replicas: 0, replica_ids: [], message: '' });
      // A poison frame: acknowledged, dropped, recorded as a rejection.
      p.send('node.observed', { ...node('n3'), node_id: '' });
    });

    const item = await fleetItem(c.uid);
    expect(item).toMatchObject({
      uid: c.uid,
      name: c.name,
      disabled: false,
      connected: true,
      region: 'eu-west-1',
      nodes: 2,
      nodes_ready: 1,
      gpus: 3,
      gpus_by_model: [
        { model: 'A100', count: 1, unhealthy: 0 },
        { model: 'H100', count: 2, unhealthy: 1 },
      ],
      deployments: { desired: 2, in_sync: 1, out_of_sync: 1 },
      rejections_1h: 1,
      connections: { truncated: false },
    });
    expect(Date.parse(item.since)).not.toBeNaN();
    expect(item.connections.changes.at(-1)).toMatchObject({ connected: true });

    // Totals cover the whole fleet (other files' clusters too): at least this cluster's share.
    const r = await h.admin('GET', '/fleet?limit=1');
    expect(r.status).toBe(200);
    expect(r.json.items).toHaveLength(1);
    expect(r.json.totals.gpus).toBeGreaterThanOrEqual(3);
    expect(r.json.totals.gpus_by_model.map((g: any) => g.model)).toEqual(expect.arrayContaining(['A100', 'H100']));
    expect(r.json.window.hours).toBe(6);
    peer.close();
  });

  it('leaves out the fleet-wide totals when asked (totals=false), for a client that has them from the first page', async () => {
    await h.newCluster('tot-a');
    await h.newCluster('tot-b');
    // The totals are read twice below and compared; the test before closed its operator, whose
    // disconnect is published a moment later and changes `connected` between the reads (it did,
    // under CI load). Wait until no earlier connection is still counted.
    await eventually(async () => (await h.admin('GET', '/fleet?limit=1')).json.totals.connected === 0);
    const first = await h.admin('GET', '/fleet?limit=1');
    expect(first.json.totals.clusters).toBeGreaterThanOrEqual(2);
    const later = await h.admin('GET', `/fleet?limit=1&totals=false&cursor=${encodeURIComponent(first.json.next_cursor)}`);
    expect(later.status).toBe(200);
    expect(later.json.totals).toBeNull();
    expect(later.json.items).toHaveLength(1);
    expect(later.json.items[0].uid > first.json.items[0].uid).toBe(true);
    // Without the parameter every page carries them, as before.
    expect((await h.admin('GET', `/fleet?limit=1&cursor=${encodeURIComponent(first.json.next_cursor)}`)).json.totals).toEqual(first.json.totals);
    expect((await h.admin('GET', '/fleet?totals=maybe')).json.error).toMatchObject({ code: 'invalid', field: 'totals' });
  });

  it("tells the operator's region from the hub's: the cluster answer carries the fleet's region as observed_region, and its list sizes", async () => {
    const c = await h.newCluster('placed');
    const { peer } = await h.openFresh(c);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    await applied(peer, (p) => {
      p.send('cluster.observed', { kubernetes_version: '1.30.2', provider: 'gke', region: 'us-east4', labels: {} });
      p.send('node.observed', node('n1'));
      p.send('device.observed', gpu('g1', 'n1', 'H100'));
      p.send('device.observed', gpu('g2', 'n1', 'H100', 'unhealthy'));
      p.send('deployment.observed', { deployment_id: 'd2', observed_revision: null, phase: 'ready', ready_replicas: 0, replica_ids: [], message: '' });
    });
    const view = (await h.admin('GET', `/clusters/${c.name}`)).json;
    expect((await fleetItem(c.uid)).region).toBe('us-east4');
    expect(view).toMatchObject({
      region: null, // this test hub's own region: none
      observed_region: 'us-east4',
      counts: { nodes: 1, gpus: 2, gpus_by_model: [{ model: 'H100', count: 2, unhealthy: 1 }], deployments: 2 },
    });
    peer.close();
  });

  it('lists at most MAX_GPU_MODELS models per cluster and in the totals, the most numerous, and sums the rest: one operator cannot make every fleet answer unbounded', async () => {
    const c = await h.newCluster('many-models');
    const { peer } = await h.openFresh(c);
    // 70 models: "big" with 3 GPUs (one unhealthy), 69 with one each.
    await applied(peer, (p) => {
      p.send('node.observed', node('n1'));
      for (let i = 0; i < 3; i++) p.send('device.observed', gpu(`big-${i}`, 'n1', 'big', i === 0 ? 'unhealthy' : 'healthy'));
      for (let i = 0; i < 69; i++) p.send('device.observed', gpu(`g-${i}`, 'n1', `m-${String(i).padStart(2, '0')}`));
    });
    const sum = (list: any[]) => list.reduce((n: number, g: any) => n + g.count, 0);
    const item = await fleetItem(c.uid);
    expect(item.gpus).toBe(72);
    expect(item.gpus_by_model).toHaveLength(MAX_GPU_MODELS);
    // Listed by name, the most numerous kept: "big" and the first 63 others by name.
    expect(item.gpus_by_model.map((g: any) => g.model)).toEqual([...Array.from({ length: 63 }, (_, i) => `m-${String(i).padStart(2, '0')}`), 'big'].sort());
    expect(item.gpus_by_model.find((g: any) => g.model === 'big')).toEqual({ model: 'big', count: 3, unhealthy: 1 });
    expect(item.gpus_other_models).toEqual({ models: 6, count: 6, unhealthy: 0 });

    const counts = (await h.admin('GET', `/clusters/${c.name}`)).json.counts;
    expect(counts).toMatchObject({ gpus: 72, gpus_by_model: item.gpus_by_model, gpus_other_models: item.gpus_other_models });

    const totals = (await h.admin('GET', '/fleet?limit=1')).json.totals;
    expect(totals.gpus_by_model.length).toBeLessThanOrEqual(MAX_GPU_MODELS);
    expect(sum(totals.gpus_by_model) + totals.gpus_other_models.count).toBe(totals.gpus);
    expect(totals.gpus_other_models.models).toBeGreaterThanOrEqual(6);
    peer.close();
  });

  it("shows when the session last applied a frame, and the operator's refusals of desired state in the last hour", async () => {
    const c = await h.newCluster('fleet-last');
    const { peer } = await h.openFresh(c);
    const before = Date.now();
    await applied(peer, (p) => p.send('node.observed', node('n1')));
    let item = await fleetItem(c.uid);
    // Stored to the second: the frame applied just now is at most a second (and the clocks' skew) older.
    expect(Date.parse(item.last_frame_at)).toBeGreaterThanOrEqual(before - 1_500);
    expect(item.refusals_1h).toBe(0);

    await h.admin('PUT', `/clusters/${c.name}/deployments/unrenderable`, desired({ min_replicas: 64, max_replicas: 64 }));
    const f = await peer.next((x) => x.type === 'deployment.desired');
    await applied(peer, (p) => p.send('error', { code: 'invalid', message: 'no such GPU model here', retryable: false }, { reply_to: f.id }));
    item = await fleetItem(c.uid);
    expect(item.refusals_1h).toBe(1);
    peer.close();
  });

  it('last_frame_at stays at the last frame the session applied when a later check publishes its view: the pings the runtime answered do not count', async () => {
    const c = await h.newCluster('fleet-pinged');
    const { peer } = await h.openFresh(c);
    // Nothing left unacknowledged, so the runtime answers the canonical ping by itself.
    peer.send('ack', {}, { ack: peer.hubCursor });
    await applied(peer, (p) => p.send('node.observed', node('n1')));
    // Well past the second last_frame_at is kept to.
    await sleep(2_500);
    const pingedAt = Date.now();
    peer.sendRaw(canonicalPing(peer.hubCursor));
    await peer.next((f) => f.type === 'pong');
    // A desired write pokes the session: its check publishes the object's view to Postgres.
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    await peer.next((f) => f.type === 'deployment.desired');
    await eventually(async () => {
      const list = await h.admin('GET', `/clusters?limit=500`);
      const s = list.json.items.find((i: any) => i.uid === c.uid)?.session;
      return s && Date.parse(s.last_poll_at) > pingedAt && Date.parse(s.live.last_frame_at) >= pingedAt - 100;
    });
    const item = await fleetItem(c.uid);
    expect(Date.parse(item.last_frame_at), item.last_frame_at).toBeLessThan(pingedAt - 1_000);
    peer.close();
  });

  it('records each connect and disconnect, shows since when, and reads the state at the window start', async () => {
    const c = await h.newCluster('flap');
    const before = await fleetItem(c.uid);
    expect(before).toMatchObject({ connected: false, since: null, connections: { connected_at_start: false, changes: [] } });

    const first = await h.openFresh(c);
    first.peer.close();
    await eventually(async () => (await fleetItem(c.uid))?.connected === false && (await fleetItem(c.uid)).connections.changes.length === 2);
    const second = await h.openFresh(c);

    const item = await eventually(async () => {
      const i = await fleetItem(c.uid);
      return i?.connected === true && i.connections.changes.length === 3 ? i : undefined;
    });
    expect(item.connections.changes.map((x: any) => x.connected)).toEqual([true, false, true]);
    expect(item.since).toBe(item.connections.changes[2].at);

    const page = await h.admin('GET', `/clusters/${c.name}/connections`);
    expect(page.status).toBe(200);
    expect(page.json.items.map((x: any) => [x.connected, x.session_id])).toEqual([
      [true, second.sessionId],
      [false, first.sessionId],
      [true, first.sessionId],
    ]);
    expect(page.json.items[0].generation).toBe(page.json.items[2].generation + 1);

    // Paging: one at a time, newest first, to the end.
    const one = await h.admin('GET', `/clusters/${c.uid}/connections?limit=1`);
    const two = await h.admin('GET', `/clusters/${c.uid}/connections?limit=1&cursor=${one.json.next_cursor}`);
    expect([one.json.items[0].id, two.json.items[0].id]).toEqual([page.json.items[0].id, page.json.items[1].id]);

    // Events older than the window count only as the state at its start.
    await h.sql(`update connection_events set at = at - interval '2 hours' where cluster_uid = $1`, [c.uid]);
    const narrow = await fleetItem(c.uid, '&hours=1');
    expect(narrow.connections).toEqual({ connected_at_start: true, changes: [], truncated: false });

    // The ownership poll rewrites cluster_owners all the time without adding history.
    await new Promise((r) => setTimeout(r, Number(h.vars.POLL_INTERVAL_MS) * 4));
    expect((await h.admin('GET', `/clusters/${c.uid}/connections`)).json.items).toHaveLength(3);

    // Disabling cuts the session: the cut shows as a disconnect.
    await h.admin('POST', `/clusters/${c.uid}/disable`);
    const cut = await eventually(async () => {
      const i = await fleetItem(c.uid);
      return i?.connected === false ? i : undefined;
    });
    expect(cut.disabled).toBe(true);
    expect((await h.admin('GET', `/clusters/${c.uid}/connections`)).json.items[0]).toMatchObject({ connected: false, session_id: second.sessionId });
  });

  it('knows the state at the window start of a cluster that stayed connected longer than the history is kept, after it disconnects', async () => {
    const c = await h.newCluster('long-lived');
    const { peer } = await h.openFresh(c);
    await eventually(async () => (await fleetItem(c.uid))?.connected === true);
    // Connected ten days ago and ever since: its connect is older than the week of history kept.
    await h.sql(`update connection_events set at = at - interval '10 days' where cluster_uid = $1`, [c.uid]);
    peer.close();
    const item = await eventually(async () => {
      const i = await fleetItem(c.uid);
      return i?.connected === false && i.connections.changes.length === 1 ? i : undefined;
    });
    // The disconnect just now ended a connection that held through the whole window.
    expect(item.connections.changes.map((x: any) => x.connected)).toEqual([false]);
    expect(item.connections.connected_at_start).toBe(true);
    expect((await fleetItem(c.uid, '&hours=168')).connections.connected_at_start).toBe(true);
  });

  it('answers 404 for an unknown cluster and 400 naming the parameter for bad input', async () => {
    expect((await h.admin('GET', '/clusters/no-such-cluster/connections')).status).toBe(404);
    const badHours = await h.admin('GET', '/fleet?hours=0');
    expect(badHours.status).toBe(400);
    expect(badHours.json.error).toMatchObject({ code: 'invalid', field: 'hours' });
    const badCursor = await h.admin('GET', '/fleet?cursor=bogus');
    expect(badCursor.status).toBe(400);
    expect(badCursor.json.error.field).toBe('cursor');
    // A cursor another list issued is not accepted either.
    const foreign = Buffer.from(JSON.stringify(['cn', '1'])).toString('base64url');
    const other = await h.admin('GET', `/fleet?cursor=${foreign}`);
    expect(other.status).toBe(400);
    expect(other.json.error.field).toBe('cursor');
  });

  it('is described in the OpenAPI document', async () => {
    const doc = (await (await fetch(`${h.hub.url}/admin/openapi.json`)).json()) as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/fleet', '/clusters/{id}/connections']));
  });
});

describe('admin reads for pollers', () => {
  it('answers a matching If-None-Match with 304 and no body, and a changed state with a new ETag', async () => {
    const c = await h.newCluster('etag');
    const url = `${h.hub.url}/admin/clusters/${c.uid}/deployments`;
    const auth = { authorization: `Bearer ${h.hub.adminToken}` };
    const first = await fetch(url, { headers: auth });
    const etag = first.headers.get('etag');
    expect(first.status).toBe(200);
    expect(etag).toMatch(/^"[0-9a-f]+"$/);
    const again = await fetch(url, { headers: { ...auth, 'if-none-match': etag ?? '' } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');

    await h.admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired());
    // A poller that accepts a second-old answer still sees the write at once: writes clear them.
    const changed = await fetch(url, { headers: { ...auth, 'if-none-match': etag ?? '', 'cache-control': 'max-age=1' } });
    expect(changed.status).toBe(200);
    expect(changed.headers.get('etag')).not.toBe(etag);
    expect(((await changed.json()) as { items: unknown[] }).items).toHaveLength(1);
  });

  it('never answers an unauthenticated request from the shared answers', async () => {
    await h.admin('GET', '/fleet');
    const res = await fetch(`${h.hub.url}/admin/fleet`, { headers: { 'cache-control': 'max-age=1' } });
    expect(res.status).toBe(401);
  });
});

describe('GET / and /dashboard/*', () => {
  it('serves the page and every file of the dashboard directory, as they are, with the security headers', async () => {
    const page = await fetch(`${h.hub.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(await page.text()).toBe(await readFile(join(STATIC_DIR, 'index.html'), 'utf8'));
    // Every file in the directory, so a file added there but not bundled (files.ts) fails here.
    const names = (await readdir(STATIC_DIR)).filter((n) => n !== 'index.html');
    expect(names.length).toBeGreaterThan(5);
    for (const file of names) {
      const res = await fetch(`${h.hub.url}/dashboard/${file}`);
      expect(res.status, file).toBe(200);
      expect(res.headers.get('content-type'), file).toMatch(file.endsWith('.css') ? /^text\/css/ : /^text\/javascript/);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('content-encoding'), file).toBe('gzip');
      expect(await res.text(), file).toBe(await readFile(join(STATIC_DIR, file), 'utf8'));
    }
    // A client that takes no gzip gets the file as it is.
    const plain = await fetch(`${h.hub.url}/dashboard/app.js`, { headers: { 'accept-encoding': 'identity' } });
    expect(plain.headers.get('content-encoding')).toBeNull();
    expect(await plain.text()).toBe(await readFile(join(STATIC_DIR, 'app.js'), 'utf8'));
  });

  it('answers an unchanged file 304 and a changed tag 200', async () => {
    const js = await fetch(`${h.hub.url}/dashboard/app.js`);
    await js.arrayBuffer();
    const tag = js.headers.get('etag');
    // Weak: one tag for the file, gzipped or not.
    expect(tag).toMatch(/^W\/"[0-9a-f]+"$/);
    const again = await fetch(`${h.hub.url}/dashboard/app.js`, { headers: { 'if-none-match': tag ?? '' } });
    expect(again.status).toBe(304);
    expect(again.headers.get('etag')).toBe(tag);
    const other = await fetch(`${h.hub.url}/dashboard/app.js`, { headers: { 'if-none-match': '"0000"' } });
    expect(other.status).toBe(200);
    await other.arrayBuffer();
    const page = await fetch(`${h.hub.url}/dashboard/app.css`);
    await page.arrayBuffer();
    expect(page.headers.get('etag')).not.toBe(tag);
  });

  it('serves nothing else', async () => {
    for (const path of ['/dashboard/nope.js', '/dashboard/index.html', '/dashboard/%2e%2e%2fwrangler.toml', '/dashboard/..%2Ffiles.ts', '/dashboard/constructor', '/index.html', '/app.js']) {
      const res = await fetch(`${h.hub.url}${path}`, { redirect: 'manual' });
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('not_found');
    }
  });
});
