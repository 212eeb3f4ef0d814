import { describe, expect, it } from 'vitest';
import { desired, node, useHub, type HubHandle, type Peer, type TestCluster } from './support/hub';

const h = useHub();

/** A GPU as device.observed carries it. */
const gpu = (id: string, nodeId: string, health: 'healthy' | 'degraded' | 'unhealthy' | 'unknown' = 'healthy') => ({
  device_id: id,
  node_id: nodeId,
  vendor: 'nvidia',
  model: 'NVIDIA H100 80GB HBM3',
  memory_total_mb: 81559,
  health,
  driver_version: '550.54.15',
});

const observed = (id: string, rev: number | null, replicas: string[], ready = replicas.length) => ({
  deployment_id: id,
  observed_revision: rev,
  phase: 'ready' as const,
  ready_replicas: ready,
  replica_ids: replicas,
  message: '',
});

const event = (subject: string, reason: string, severity: 'info' | 'warning' | 'error' = 'info') => ({
  subject,
  reason,
  message: `${reason} on ${subject}`,
  severity,
  occurred_at: new Date().toISOString(),
});

/** Send frames and wait until the hub has applied every one of them. */
async function applied(peer: Peer, send: (p: Peer) => void): Promise<void> {
  send(peer);
  await peer.ackedThrough(peer.nextSeq - 1);
}

/** Follow next_cursor from the first page to the last, checking every page's size. */
async function walk(hub: HubHandle, path: string, limit: number): Promise<{ items: any[]; pages: number }> {
  const items: any[] = [];
  let cursor: string | null = null;
  let pages = 0;
  const sep = path.includes('?') ? '&' : '?';
  do {
    const r = await hub.admin('GET', `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.items.length).toBeLessThanOrEqual(limit);
    if (r.json.next_cursor !== null) expect(r.json.items.length).toBe(limit);
    items.push(...r.json.items);
    cursor = r.json.next_cursor;
    pages++;
    if (pages > 1000) throw new Error('pagination does not terminate');
  } while (cursor !== null);
  return { items, pages };
}

async function session(c: TestCluster): Promise<Peer> {
  return (await h.openFresh(c)).peer;
}

describe('GET /admin/clusters/{id}/deployments: desired and observed side by side', () => {
  it('joins desired and observed by deployment_id, with the replica set sorted and in_sync computed', async () => {
    const c = await h.newCluster('dep');
    const peer = await session(c);
    const a = await h.admin('PUT', `/clusters/${c.name}/deployments/d-a`, desired({ workload_id: 'wa', min_replicas: 2, max_replicas: 4 }));
    const b = await h.admin('PUT', `/clusters/${c.name}/deployments/d-b`, desired({ workload_id: 'wb' }));
    await h.admin('PUT', `/clusters/${c.name}/deployments/d-only-desired`, desired());
    await h.admin('PUT', `/clusters/${c.name}/deployments/d-gone`, desired());
    const gone = await h.admin('DELETE', `/clusters/${c.name}/deployments/d-gone`);
    expect([a.status, b.status, gone.status]).toEqual([200, 200, 200]);

    await applied(peer, (p) => {
      p.send('deployment.observed', observed('d-a', a.json.revision, ['r-c', 'r-a', 'r-b'], 2));
      p.send('deployment.observed', observed('d-b', b.json.revision - 1, ['r-1']));
      p.send('deployment.observed', observed('d-only-observed', 3, []));
      // Still terminating after the withdrawal; it even echoes the tombstone's revision.
      p.send('deployment.observed', { ...observed('d-gone', gone.json.revision, ['g-1']), phase: 'terminating' });
    });

    const r = await h.admin('GET', `/clusters/${c.name}/deployments`);
    expect(r.status).toBe(200);
    expect(r.json.next_cursor).toBeNull();
    const byId = Object.fromEntries(r.json.items.map((i: any) => [i.deployment_id, i]));
    expect(r.json.items.map((i: any) => i.deployment_id)).toEqual(['d-a', 'd-b', 'd-gone', 'd-only-desired', 'd-only-observed']);

    expect(byId['d-a']).toMatchObject({
      desired: {
        workload_id: 'wa',
        revision: a.json.revision,
        min_replicas: 2,
        max_replicas: 4,
        serving: desired().serving,
        deleted: false,
      },
      observed: { observed_revision: a.json.revision, phase: 'ready', ready_replicas: 2, message: '', replica_ids: ['r-a', 'r-b', 'r-c'] },
      in_sync: true,
    });
    expect(Date.parse(byId['d-a'].desired.updated_at)).not.toBeNaN();
    expect(Date.parse(byId['d-a'].observed.updated_at)).not.toBeNaN();
    expect(byId['d-b']).toMatchObject({ observed: { observed_revision: b.json.revision - 1, replica_ids: ['r-1'] }, in_sync: false });
    expect(byId['d-only-desired']).toMatchObject({ desired: { workload_id: 'w1' }, observed: null, in_sync: false });
    expect(byId['d-only-observed']).toMatchObject({ desired: null, observed: { observed_revision: 3, replica_ids: [] }, in_sync: false });
    // Withdrawn: without the flag the tombstone is no desired entry, and the still-running
    // deployment shows as observed only.
    expect(byId['d-gone']).toMatchObject({ desired: null, observed: { phase: 'terminating', replica_ids: ['g-1'] }, in_sync: false });

    const all = await h.admin('GET', `/clusters/${c.uid}/deployments?include_withdrawn=true`);
    const withdrawn = all.json.items.find((i: any) => i.deployment_id === 'd-gone');
    expect(withdrawn).toMatchObject({
      // The tombstone keeps the configuration that was withdrawn (the operator is sent serving: null).
      desired: { deleted: true, serving: desired().serving, revision: gone.json.revision },
      observed: { observed_revision: gone.json.revision },
      in_sync: false,
    });

    // A withdrawn deployment the operator no longer runs is listed only with the flag.
    await applied(peer, (p) => p.send('deployment.removed', { deployment_id: 'd-gone' }));
    const after = await h.admin('GET', `/clusters/${c.name}/deployments`);
    expect(after.json.items.map((i: any) => i.deployment_id)).not.toContain('d-gone');
    const flagged = await h.admin('GET', `/clusters/${c.name}/deployments?include_withdrawn=true`);
    expect(flagged.json.items.find((i: any) => i.deployment_id === 'd-gone')).toMatchObject({ desired: { deleted: true }, observed: null });
    peer.close();
  });

  it('shows the replica set the operator last named: replicas it stops naming disappear', async () => {
    const c = await h.newCluster('rep');
    const peer = await session(c);
    await applied(peer, (p) => p.send('deployment.observed', observed('d', 1, ['r-3', 'r-1', 'r-2'])));
    await applied(peer, (p) => p.send('deployment.observed', observed('d', 1, ['r-4', 'r-2'])));
    const r = await h.admin('GET', `/clusters/${c.name}/deployments`);
    expect(r.json.items).toHaveLength(1);
    expect(r.json.items[0].observed.replica_ids).toEqual(['r-2', 'r-4']);
    peer.close();
  });

  it('a cluster with nothing desired or observed answers an empty page, not 404', async () => {
    const c = await h.newCluster('empty');
    for (const p of ['deployments', 'nodes', 'devices', 'events', 'rejections', 'operations']) {
      const r = await h.admin('GET', `/clusters/${c.name}/${p}`);
      expect(r, p).toMatchObject({ status: 200, json: { items: [], next_cursor: null } });
    }
  });
});

describe('GET /admin/clusters/{id}/nodes and /devices', () => {
  it('lists nodes with their allocatable capacity and the GPUs reported on each', async () => {
    const c = await h.newCluster('nodes');
    const peer = await session(c);
    await applied(peer, (p) => {
      p.send('node.observed', { ...node('n-2', false), labels: { pool: 'h100' }, taints: [{ key: 'gpu', effect: 'NoSchedule' }] });
      p.send('node.observed', node('n-1'));
      p.send('device.observed', gpu('GPU-2', 'n-2'));
      p.send('device.observed', gpu('GPU-1', 'n-1'));
      p.send('device.observed', gpu('GPU-3', 'n-2', 'degraded'));
    });
    const r = await h.admin('GET', `/clusters/${c.uid}/nodes`);
    expect(r.status).toBe(200);
    expect(r.json.items.map((n: any) => n.node_id)).toEqual(['n-1', 'n-2']);
    expect(r.json.items[1]).toMatchObject({
      node_id: 'n-2',
      name: 'n-2',
      ready: false,
      schedulable: true,
      labels: { pool: 'h100' },
      taints: [{ key: 'gpu', effect: 'NoSchedule' }],
      allocatable: { gpus: 8, cpu_millis: 64000, memory_mb: 512000 },
      devices: 2,
    });
    expect(r.json.items[0].devices).toBe(1);

    const d = await h.admin('GET', `/clusters/${c.name}/devices`);
    expect(d.json.items.map((x: any) => x.device_id)).toEqual(['GPU-1', 'GPU-2', 'GPU-3']);
    expect(d.json.items[2]).toMatchObject({
      device_id: 'GPU-3',
      node_id: 'n-2',
      vendor: 'nvidia',
      model: 'NVIDIA H100 80GB HBM3',
      memory_total_mb: 81559,
      health: 'degraded',
      driver_version: '550.54.15',
    });

    const onN2 = await h.admin('GET', `/clusters/${c.name}/devices?node_id=n-2`);
    expect(onN2.json.items.map((x: any) => x.device_id)).toEqual(['GPU-2', 'GPU-3']);
    const onNone = await h.admin('GET', `/clusters/${c.name}/devices?node_id=n-9`);
    expect(onNone.json).toEqual({ items: [], next_cursor: null });

    // Removal outside a resync is visible: the node goes, its GPUs stay until reported gone.
    await applied(peer, (p) => p.send('node.removed', { node_id: 'n-1' }));
    expect((await h.admin('GET', `/clusters/${c.name}/nodes`)).json.items.map((n: any) => n.node_id)).toEqual(['n-2']);
    expect((await h.admin('GET', `/clusters/${c.name}/devices?node_id=n-1`)).json.items).toHaveLength(1);
    peer.close();
  });
});

describe('GET /admin/clusters/{id}/events', () => {
  it('lists events newest first and filters by kind and subject', async () => {
    const c = await h.newCluster('events');
    const peer = await session(c);
    const sent: { id: string; kind: string; subject: string; reason: string }[] = [];
    await applied(peer, (p) => {
      const add = (type: 'node.event' | 'device.event' | 'deployment.event', subject: string, reason: string) =>
        sent.push({ id: p.send(type, event(subject, reason, 'warning')), kind: type.split('.')[0] as string, subject, reason });
      add('node.event', 'n-1', 'NodeNotReady');
      add('device.event', 'GPU-1', 'XidError');
      add('deployment.event', 'd-1', 'ScaledUp');
      add('node.event', 'n-2', 'NodeReady');
      add('node.event', 'n-1', 'NodeReady');
    });
    const r = await h.admin('GET', `/clusters/${c.name}/events`);
    expect(r.status).toBe(200);
    expect(r.json.items.map((e: any) => e.frame_id)).toEqual(sent.map((s) => s.id).reverse());
    expect(r.json.items[0]).toMatchObject({
      kind: 'node',
      subject: 'n-1',
      reason: 'NodeReady',
      message: 'NodeReady on n-1',
      severity: 'warning',
      seq: 5,
    });
    expect(Date.parse(r.json.items[0].occurred_at)).not.toBeNaN();
    expect(Date.parse(r.json.items[0].received_at)).not.toBeNaN();

    const nodes = await h.admin('GET', `/clusters/${c.name}/events?kind=node`);
    expect(nodes.json.items.map((e: any) => e.reason)).toEqual(['NodeReady', 'NodeReady', 'NodeNotReady']);
    const n1 = await h.admin('GET', `/clusters/${c.name}/events?subject=n-1`);
    expect(n1.json.items.map((e: any) => e.reason)).toEqual(['NodeReady', 'NodeNotReady']);
    const both = await h.admin('GET', `/clusters/${c.name}/events?kind=device&subject=GPU-1`);
    expect(both.json.items.map((e: any) => e.reason)).toEqual(['XidError']);
    const none = await h.admin('GET', `/clusters/${c.name}/events?kind=device&subject=n-1`);
    expect(none.json.items).toEqual([]);
    peer.close();
  });
});

describe('GET /admin/clusters/{id}/rejections', () => {
  it('lists poison frames newest first with what identifies the sender', async () => {
    const c = await h.newCluster('rej');
    const peer = await session(c);
    let firstId = '';
    await applied(peer, (p) => {
      firstId = p.send('deployment.observed', { ...observed('d', 1, ['r-1', 'r-1']), ready_replicas: 1 });
      p.send('node.observed', node('fine'));
    });
    // An unknown type is a rejection too (answered with an error naming it).
    peer.sendRaw(
      JSON.stringify({ v: 1, type: 'recipe.desired', id: '01J9X2E5G7QK8V3B0YHN4TZC6M', seq: 3, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {} }),
    );
    peer.nextSeq = 4;
    await peer.ackedThrough(3);
    const w = await h.sql<{ session_id: string }>('select session_id from cluster_owners where cluster_uid = $1', [c.uid]);
    const r = await h.admin('GET', `/clusters/${c.name}/rejections`);
    expect(r.status).toBe(200);
    expect(r.json.items).toHaveLength(2);
    expect(r.json.items[0]).toMatchObject({ seq: 3, type: 'recipe.desired', frame_id: '01J9X2E5G7QK8V3B0YHN4TZC6M', session_id: w[0]?.session_id });
    expect(r.json.items[1]).toMatchObject({ seq: 1, type: 'deployment.observed', frame_id: firstId });
    expect(r.json.items[1].reason).toMatch(/replica_ids/);
    expect(r.json.items[0].id).toBeGreaterThan(r.json.items[1].id);
    peer.close();
  });
});

describe('pagination: ?limit and an opaque keyset ?cursor', () => {
  it('walks every item of every list exactly once, in list order', async () => {
    const c = await h.newCluster('page');
    const peer = await session(c);
    const N = 23;
    const ids = Array.from({ length: N }, (_, i) => `x-${String(i).padStart(2, '0')}`);
    // Half desired, half observed, overlapping in the middle: the full outer join pages too.
    for (const id of ids.slice(0, 15)) await h.admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired());
    await applied(peer, (p) => {
      for (const id of ids) p.send('node.observed', node(id));
      for (const id of ids) p.send('device.observed', gpu(id, 'n'));
      for (const id of ids.slice(8)) p.send('deployment.observed', observed(id, null, []));
      for (const id of ids) p.send('node.event', event(id, 'Tick'));
      // Poison: a bad node id.
      for (let i = 0; i < N; i++) p.send('node.observed', node(`-bad-${i}`));
    });
    const events = await walk(h, `/clusters/${c.name}/events`, 5);
    expect(events.pages).toBe(5);
    expect(events.items.map((e) => e.subject)).toEqual([...ids].reverse());

    for (const [path, key] of [
      ['nodes', 'node_id'],
      ['devices', 'device_id'],
      ['deployments', 'deployment_id'],
    ] as const) {
      for (const limit of [1, 5, 23, 100]) {
        const w = await walk(h, `/clusters/${c.uid}/${path}`, limit);
        expect(w.items.map((i) => i[key]), `${path} limit ${limit}`).toEqual(ids);
        expect(w.pages).toBe(limit >= N ? 1 : Math.ceil(N / limit));
      }
    }
    const rej = await walk(h, `/clusters/${c.name}/rejections`, 7);
    expect(rej.items).toHaveLength(N);
    const rejIds = rej.items.map((r) => r.id);
    expect(new Set(rejIds).size).toBe(N);
    expect(rejIds).toEqual([...rejIds].sort((x, y) => y - x));
    // Filters and cursors compose.
    const filtered = await walk(h, `/clusters/${c.name}/events?kind=node`, 10);
    expect(filtered.items).toHaveLength(N);
    const page1 = await h.admin('GET', `/clusters/${c.name}/devices?node_id=n&limit=20`);
    expect(page1.json.items).toHaveLength(20);
    const page2 = await h.admin('GET', `/clusters/${c.name}/devices?node_id=n&limit=20&cursor=${page1.json.next_cursor}`);
    expect(page2.json).toMatchObject({ next_cursor: null });
    expect(page2.json.items.map((d: any) => d.device_id)).toEqual(ids.slice(20));
    peer.close();
  });

  it('defaults to 100 items a page', async () => {
    const c = await h.newCluster('dflt');
    const peer = await session(c);
    await applied(peer, (p) => {
      for (let i = 0; i < 101; i++) p.send('node.observed', node(`n-${String(i).padStart(3, '0')}`));
    });
    const r = await h.admin('GET', `/clusters/${c.name}/nodes`);
    expect(r.json.items).toHaveLength(100);
    expect(typeof r.json.next_cursor).toBe('string');
    const rest = await h.admin('GET', `/clusters/${c.name}/nodes?cursor=${r.json.next_cursor}`);
    expect(rest.json).toMatchObject({ items: [{ node_id: 'n-100' }], next_cursor: null });
    peer.close();
  });
});

describe('errors: typed JSON', () => {
  const lists = ['deployments', 'nodes', 'devices', 'events', 'rejections', 'operations'];

  it('an unknown cluster (by uid or by name) is a 404 on every /clusters/{id}/... read', async () => {
    for (const id of ['no-such-cluster', '01J9X2E5G7QK8V3B0YHN4TZC6M']) {
      for (const p of lists) {
        const r = await h.admin('GET', `/clusters/${id}/${p}`);
        expect(r, `${id}/${p}`).toMatchObject({ status: 404, json: { error: { code: 'not_found' } } });
      }
    }
  });

  it('a bad query parameter is a 400 that names the field', async () => {
    const c = await h.newCluster('bad');
    const nodesPage = await h.admin('GET', `/clusters/${c.name}/nodes?limit=1`);
    const foreignCursor = Buffer.from(JSON.stringify(['nd', 'x'])).toString('base64url');
    const badTs = Buffer.from(JSON.stringify(['ev', '2026-13-01T00:00:00.000000Z', 'x'])).toString('base64url');
    const cases: [string, string][] = [
      ['nodes?limit=0', 'limit'],
      ['nodes?limit=501', 'limit'],
      ['nodes?limit=abc', 'limit'],
      ['nodes?limit=1.5', 'limit'],
      ['nodes?cursor=not-a-cursor', 'cursor'],
      ['nodes?cursor=%2B%2F%3D', 'cursor'],
      [`events?cursor=${foreignCursor}`, 'cursor'],
      [`events?cursor=${badTs}`, 'cursor'],
      ['events?kind=cluster', 'kind'],
      ['events?subject=-x', 'subject'],
      ['devices?node_id=a%20b', 'node_id'],
      ['deployments?include_withdrawn=yes', 'include_withdrawn'],
      ['rejections?cursor=eyJ4IjoxfQ', 'cursor'],
      ['operations?limit=-1', 'limit'],
    ];
    expect(nodesPage.json.next_cursor).toBeNull();
    for (const [q, field] of cases) {
      const r = await h.admin('GET', `/clusters/${c.name}/${q}`);
      expect(r, q).toMatchObject({ status: 400, json: { error: { code: 'invalid', field } } });
      expect(r.json.error.message, q).toContain(field);
    }
  });

  it('an unknown query parameter (a misspelt filter or cursor) is a 400 that names it, not the unfiltered list or the first page again', async () => {
    const c = await h.newCluster('typo');
    // Each would otherwise answer 200 with the whole list (a filter that did not apply) or, for a
    // cursor, the first page with a next_cursor: a script walking pages would loop for ever.
    const cases: [string, string][] = [
      [`/clusters/${c.name}/devices?node=n1`, 'node'],
      [`/clusters/${c.name}/events?type=node`, 'type'],
      [`/clusters/${c.name}/deployments?include_withdrawn=false&withdrawn=true`, 'withdrawn'],
      [`/clusters/${c.name}/nodes?curser=abc`, 'curser'],
      [`/clusters/${c.name}/rejections?limt=5`, 'limt'],
      [`/clusters/${c.name}/operations?page=2`, 'page'],
      [`/clusters/${c.name}/connections?since=1h`, 'since'],
      ['/fleet?hour=24', 'hour'],
      ['/clusters?offset=500', 'offset'],
    ];
    for (const [path, field] of cases) {
      const r = await h.admin('GET', path);
      expect(r, path).toMatchObject({ status: 400, json: { error: { code: 'invalid', field } } });
      expect(r.json.error.message, path).toContain(field);
    }
    // The documented parameters still answer.
    expect((await h.admin('GET', `/clusters/${c.name}/devices?node_id=n1&limit=5`)).status).toBe(200);
    expect((await h.admin('GET', '/fleet?hours=24&limit=10&totals=false')).status).toBe(200);
  });

  it('a well-formed cursor the hub never issued (a NUL in a text key, year 0000) is a 400 naming cursor, not a database refusal', async () => {
    // Both decode and pass the shape checks; Postgres then refuses the value (text cannot hold
    // U+0000, its years start at 1), which used to come back as a 400 without the field.
    const c = await h.newCluster('forged');
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const paths = [
      `/clusters/${c.name}/deployments?cursor=${b64(['dp', 'a\u0000b'])}`,
      `/clusters/${c.name}/nodes?cursor=${b64(['nd', 'a\u0000b'])}`,
      `/clusters/${c.name}/devices?cursor=${b64(['dv', 'a\u0000b'])}`,
      `/clusters/${c.name}/events?cursor=${b64(['ev', '0000-01-01T00:00:00.000000Z', 'x'])}`,
      `/clusters/${c.name}/operations?cursor=${b64(['op', '0000-06-01T00:00:00.000000Z', 'x'])}`,
      `/fleet?cursor=${b64(['fl', 'a\u0000b'])}`,
      `/clusters?cursor=${b64(['cl', 'a\u0000b'])}`,
    ];
    for (const p of paths) {
      const r = await h.admin('GET', p);
      expect([r.status, r.json?.error?.code, r.json?.error?.field], p).toEqual([400, 'invalid', 'cursor']);
    }
  });
});

/** Every route the admin API registers; openapi.json must describe exactly these. */
const ROUTES = [
  'post /clusters',
  'get /clusters',
  'get /clusters/{id}',
  'patch /clusters/{id}',
  'post /clusters/{id}/rotate-token',
  'post /clusters/{id}/disable',
  'post /clusters/{id}/enable',
  'put /clusters/{id}/deployments',
  'get /clusters/{id}/session/wakes',
  'put /clusters/{id}/deployments/{deployment_id}',
  'delete /clusters/{id}/deployments/{deployment_id}',
  'get /clusters/{id}/deployments',
  'get /clusters/{id}/nodes',
  'get /clusters/{id}/devices',
  'get /clusters/{id}/events',
  'get /clusters/{id}/rejections',
  'post /clusters/{id}/operations',
  'get /clusters/{id}/operations',
  'get /operations/{operation_id}',
  'get /fleet',
  'get /clusters/{id}/connections',
].sort();

describe('GET /admin/openapi.json', () => {
  it('is public and describes every route with its schemas and the bearer scheme', async () => {
    const res = await fetch(`${h.hub.url}/admin/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as any;
    expect(doc.openapi).toBe('3.0.3');
    expect(doc.security).toEqual([{ bearer: [] }]);
    expect(doc.components.securitySchemes.bearer).toEqual({ type: 'http', scheme: 'bearer' });

    const documented: string[] = [];
    for (const [path, ops] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(ops)) {
        documented.push(`${method} ${path}`);
        const ok = Object.keys(op.responses).find((s) => s.startsWith('2')) as string;
        expect(op.responses[ok].content['application/json'].schema, `${method} ${path}`).toBeDefined();
        expect(op.responses['401'], `${method} ${path}`).toBeDefined();
        for (const name of path.match(/\{(\w+)\}/g) ?? []) {
          expect(op.parameters.some((p: any) => p.in === 'path' && `{${p.name}}` === name), `${method} ${path} ${name}`).toBe(true);
        }
        if (method === 'post' || method === 'put' || method === 'patch') {
          if (path !== '/clusters/{id}/rotate-token' && !path.endsWith('/disable') && !path.endsWith('/enable')) {
            expect(op.requestBody.content['application/json'].schema, `${method} ${path}`).toBeDefined();
          }
        }
      }
    }
    expect(documented.sort()).toEqual(ROUTES);

    const lists = ['deployments', 'nodes', 'devices', 'events', 'rejections', 'operations'];
    for (const l of lists) {
      const params = doc.paths[`/clusters/{id}/${l}`].get.parameters.map((p: any) => p.name);
      expect(params, l).toEqual(expect.arrayContaining(['id', 'limit', 'cursor']));
    }
    expect(doc.paths['/clusters/{id}/events'].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['kind', 'subject']));
    expect(doc.paths['/clusters/{id}/devices'].get.parameters.map((p: any) => p.name)).toContain('node_id');
    expect(doc.paths['/clusters/{id}/deployments'].get.parameters.map((p: any) => p.name)).toContain('include_withdrawn');
    for (const schema of ['DeploymentState', 'DesiredSide', 'ObservedSide', 'Node', 'Device', 'Event', 'Rejection', 'Operation', 'OperationDetail', 'Error']) {
      expect(doc.components.schemas[schema], schema).toBeDefined();
    }
  });

  it('every other admin route answers 401 JSON without the bearer token, or with a wrong one', async () => {
    const concrete = (path: string) =>
      path.replace('{id}', 'some-cluster').replace('{deployment_id}', 'd-1').replace('{operation_id}', '01J9X2C8W1F4TQ3R7MZK5N2B9D');
    const probes = ROUTES.map((r) => r.split(' ') as [string, string]).map(([m, p]) => [m, concrete(p)] as const);
    // A path that merely ends like the public one is not public.
    probes.push(['put', '/clusters/some-cluster/deployments/openapi.json'], ['delete', '/clusters/some-cluster/deployments/openapi.json']);
    const credentials: Record<string, string>[] = [{}, { authorization: 'Bearer wrong-token' }];
    for (const [method, path] of probes) {
      for (const headers of credentials) {
        const res = await fetch(`${h.hub.url}/admin${path}`, {
          method: method.toUpperCase(),
          headers: { 'content-type': 'application/json', ...headers },
          ...(method === 'post' || method === 'put' || method === 'patch' ? { body: JSON.stringify(desired({ name: 'x', kind: 'node.drain', target: 'n', deadline_s: 5 })) } : {}),
        });
        expect(res.status, `${method} ${path}`).toBe(401);
        expect(res.headers.get('content-type')).toMatch(/application\/json/);
        expect(await res.json()).toMatchObject({ error: { code: 'unauthorized' } });
      }
    }
    // And nothing was written by those requests.
    expect(await h.sql(`select 1 from clusters where name = 'x'`)).toEqual([]);
  });
});
