/**
 * Every admin answer, of every route and of the statuses a client meets in normal use, checked
 * against the schema openapi.json documents for that route and status: a client generated from
 * the document must be able to read what the hub actually sends.
 */
import { describe, expect, it } from 'vitest';
import { admin, connect, eventually, newCluster, node, worker, type Peer } from './support/peer';

type Schema = Record<string, any>;

/** The OpenAPI 3.0 subset the hub's document uses: $ref, nullable, enum, type, properties, required, items, anyOf/oneOf/allOf. */
function problems(doc: Schema, schema: Schema, v: unknown, at: string, out: string[]): void {
  if (schema.$ref) {
    const name = String(schema.$ref).split('/').pop() as string;
    return problems(doc, doc.components.schemas[name], v, at, out);
  }
  if (v === null) {
    if (!schema.nullable) out.push(`${at}: null, not nullable`);
    return;
  }
  if (schema.anyOf || schema.oneOf) {
    const alts: Schema[] = schema.anyOf ?? schema.oneOf;
    if (!alts.some((s) => { const o: string[] = []; problems(doc, s, v, at, o); return o.length === 0; })) out.push(`${at}: matches none of its alternatives`);
    return;
  }
  for (const s of schema.allOf ?? []) problems(doc, s, v, at, out);
  if (schema.enum && !schema.enum.includes(v)) out.push(`${at}: ${JSON.stringify(v)} not in ${JSON.stringify(schema.enum)}`);
  const t = schema.type;
  if (t === 'object') {
    if (typeof v !== 'object' || Array.isArray(v)) return void out.push(`${at}: not an object`);
    const o = v as Record<string, unknown>;
    for (const k of schema.required ?? []) if (!(k in o)) out.push(`${at}.${k}: required, missing`);
    for (const [k, val] of Object.entries(o)) {
      const p = schema.properties?.[k];
      if (p) problems(doc, p, val, `${at}.${k}`, out);
      else if (schema.additionalProperties === false) out.push(`${at}.${k}: not documented`);
      else if (typeof schema.additionalProperties === 'object') problems(doc, schema.additionalProperties, val, `${at}.${k}`, out);
    }
  } else if (t === 'array') {
    if (!Array.isArray(v)) return void out.push(`${at}: not an array`);
    v.forEach((x, i) => problems(doc, schema.items ?? {}, x, `${at}.${i}`, out));
  } else if (t === 'string') {
    if (typeof v !== 'string') out.push(`${at}: ${JSON.stringify(v)} is not a string`);
  } else if (t === 'integer') {
    if (!Number.isInteger(v)) out.push(`${at}: ${JSON.stringify(v)} is not an integer`);
  } else if (t === 'number') {
    if (typeof v !== 'number') out.push(`${at}: ${JSON.stringify(v)} is not a number`);
  } else if (t === 'boolean') {
    if (typeof v !== 'boolean') out.push(`${at}: ${JSON.stringify(v)} is not a boolean`);
  }
}

let doc: Schema;
const violations: string[] = [];

/** Hono's secureHeaders on every /admin answer (src/hub/admin/app.ts adminHeaders). */
const SECURITY_HEADERS = [
  'content-security-policy',
  'cross-origin-opener-policy',
  'cross-origin-resource-policy',
  'origin-agent-cluster',
  'referrer-policy',
  'strict-transport-security',
  'x-content-type-options',
  'x-dns-prefetch-control',
  'x-download-options',
  'x-frame-options',
  'x-permitted-cross-domain-policies',
  'x-xss-protection',
];

/** Call a route and check the answer against openapi.json: the status documented, the body its schema. */
async function call(method: string, route: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await worker.fetch(`http://hub.test/admin${path}`, {
    method,
    headers: { authorization: 'Bearer test-admin-token', 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  const op = doc.paths[route]?.[method.toLowerCase()];
  const where = `${method} ${path} → ${res.status}`;
  const documented = op?.responses?.[String(res.status)];
  if (!documented) {
    violations.push(`${where}: status not documented`);
    return { status: res.status, json };
  }
  // Headers the hub sends for the client to act on (the standard ones aside) are declared too.
  // The browser's security headers are on every admin answer alike (README, "Dashboard"): checked
  // present here rather than declared on each response.
  const declared = Object.keys(documented.headers ?? {}).map((k) => k.toLowerCase());
  for (const [k] of res.headers) {
    if (!['content-type', 'content-length', 'cache-control', 'vary', ...SECURITY_HEADERS].includes(k) && !declared.includes(k)) violations.push(`${where}: header ${k} not declared`);
  }
  for (const k of SECURITY_HEADERS) if (!res.headers.has(k)) violations.push(`${where}: security header ${k} missing`);
  const schema = documented.content?.['application/json']?.schema;
  if (schema) {
    const out: string[] = [];
    problems(doc, schema, json, 'body', out);
    violations.push(...out.map((p) => `${where}: ${p}`));
  } else if (text) violations.push(`${where}: a body where none is documented`);
  return { status: res.status, json };
}

async function applied(peer: Peer, send: (p: Peer) => void): Promise<void> {
  send(peer);
  await peer.ackedThrough(peer.nextSeq - 1);
}

describe('admin answers match openapi.json', () => {
  it('every route, with a connected cluster that reported nodes, GPUs, deployments, events, link stats, a rejection and an operation', async () => {
    doc = await (await worker.fetch('http://hub.test/admin/openapi.json')).json();
    // The checker itself sees a wrong answer.
    const wrong: string[] = [];
    problems(doc, { $ref: '#/components/schemas/Error' }, { error: { code: 1 } }, 'body', wrong);
    expect(wrong.sort()).toEqual(['body.error.code: 1 is not a string', 'body.error.message: required, missing']);
    const c = await newCluster('oa');
    const peer = await connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end');
    const op = await admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target: 'n1', params: { reason: 'x' }, deadline_s: 600 });
    const start = await peer.next((f) => f.type === 'operation.start');
    // One frame at a time: workerd's test pool may reorder a burst (support/peer.ts).
    await applied(peer, (p) => p.send('cluster.observed', { kubernetes_version: '1.30', provider: 'gke', region: 'us-east4', labels: {} }));
    await applied(peer, (p) => p.send('node.observed', node('n1')));
    await applied(peer, (p) => p.send('device.observed', { device_id: 'g1', node_id: 'n1', vendor: 'nvidia', model: 'H100', memory_total_mb: 81920, health: 'healthy', driver_version: '550' }));
    await applied(peer, (p) => p.send('deployment.observed', { deployment_id: 'd-obs', observed_revision: null, phase: 'ready', ready_replicas: 1, replica_ids: ['r1'], message: '' }));
    await applied(peer, (p) => p.send('node.event', { subject: 'n1', reason: 'NodeReady', message: 'ok', severity: 'info', occurred_at: new Date().toISOString() }));
    await applied(peer, (p) => p.send('link.stats', { epoch: '01J9X2E5G7QK8V3B0YHN4TZC6M', dropped_events: 0, evicted_frames: 0, replaced_frames: 0 }));
    await applied(peer, (p) => p.send('operation.accepted', { operation_id: op.json.operation_id }, { reply_to: start.id }));
    await applied(peer, (p) => p.send('operation.progress', { operation_id: op.json.operation_id, phase: 'cordoning', message: '' }));
    await applied(peer, (p) => p.send('operation.result', { operation_id: op.json.operation_id, outcome: 'succeeded', message: 'done' }));
    // A rejection: a deployment.observed naming a replica twice.
    await applied(peer, (p) => p.send('deployment.observed', { deployment_id: 'bad', observed_revision: null, phase: 'ready', ready_replicas: 1, replica_ids: ['r', 'r'], message: '' }));
    await eventually(async () => (await admin('GET', `/clusters/${c.name}`)).json.link !== null);

    const id = c.name;
    await call('POST', '/clusters', '/clusters', { name: `${c.name}-2`, location_hint: 'weur' });
    await call('POST', '/clusters', '/clusters', { name: c.name });
    await call('POST', '/clusters', '/clusters', { name: 'Bad Name' });
    await call('GET', '/clusters', '/clusters?limit=2');
    await call('GET', '/clusters/{id}', `/clusters/${id}`);
    await call('GET', '/clusters/{id}', '/clusters/no-such-cluster');
    const etag = (await worker.fetch(`http://hub.test/admin/clusters/${id}/nodes`, { headers: { authorization: 'Bearer test-admin-token' } })).headers.get('etag') ?? '';
    await call('GET', '/clusters/{id}/nodes', `/clusters/${id}/nodes`, undefined, { 'if-none-match': etag });
    await call('PATCH', '/clusters/{id}', `/clusters/${id}`, { location_hint: null });
    await call('PATCH', '/clusters/{id}', `/clusters/${id}`, {});
    await call('PUT', '/clusters/{id}/deployments/{deployment_id}', `/clusters/${id}/deployments/d1`, {
      workload_id: 'w1', min_replicas: 1, max_replicas: 2,
      serving: { engine: 'vllm', model: 'm', image: 'img:1', args: [], env: { A: '1' }, gpus_per_replica: 1, gpu_model: null, port: 8000 },
    });
    await call('PUT', '/clusters/{id}/deployments', `/clusters/${id}/deployments`, {
      deployments: [{ deployment_id: 'd2', workload_id: 'w1', min_replicas: 0, max_replicas: 1, serving: { engine: 'vllm', model: 'm', image: 'img:1', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 } }],
    });
    await call('PUT', '/clusters/{id}/deployments/{deployment_id}', `/clusters/${id}/deployments/d3`, { workload_id: 'w1', min_replicas: 3, max_replicas: 2, serving: {} });
    await call('DELETE', '/clusters/{id}/deployments/{deployment_id}', `/clusters/${id}/deployments/d2`);
    await call('DELETE', '/clusters/{id}/deployments/{deployment_id}', `/clusters/${id}/deployments/d2`);
    await call('DELETE', '/clusters/{id}/deployments/{deployment_id}', `/clusters/${id}/deployments/never`);
    await call('GET', '/clusters/{id}/deployments', `/clusters/${id}/deployments?include_withdrawn=true&limit=2`);
    await call('GET', '/clusters/{id}/deployments', `/clusters/${id}/deployments?limit=abc`);
    await call('GET', '/clusters/{id}/nodes', `/clusters/${id}/nodes`);
    await call('GET', '/clusters/{id}/devices', `/clusters/${id}/devices?node_id=n1`);
    await call('GET', '/clusters/{id}/events', `/clusters/${id}/events?kind=node`);
    await call('GET', '/clusters/{id}/rejections', `/clusters/${id}/rejections`);
    await call('POST', '/clusters/{id}/operations', `/clusters/${id}/operations`, { kind: 'node.drain', target: 'n1', deadline_s: 60 }, { 'idempotency-key': 'k1' });
    await call('POST', '/clusters/{id}/operations', `/clusters/${id}/operations`, { kind: 'node.drain', target: 'n1', deadline_s: 60 }, { 'idempotency-key': 'k1' });
    await call('POST', '/clusters/{id}/operations', `/clusters/${id}/operations`, { kind: 'node.cordon', target: 'n1', deadline_s: 60 }, { 'idempotency-key': 'k1' });
    await call('GET', '/clusters/{id}/operations', `/clusters/${id}/operations?limit=1`);
    await call('GET', '/operations/{operation_id}', `/operations/${op.json.operation_id}`);
    await call('GET', '/operations/{operation_id}', '/operations/01J9X2E5G7QK8V3B0YHN4TZC6M');
    await call('GET', '/operations/{operation_id}', '/operations/nope');
    await call('GET', '/clusters/{id}/session/wakes', `/clusters/${id}/session/wakes`);
    await call('GET', '/fleet', '/fleet?limit=2');
    await call('GET', '/clusters/{id}/connections', `/clusters/${id}/connections`);
    await call('POST', '/clusters/{id}/rotate-token', `/clusters/${c.name}-2/rotate-token`);
    await call('POST', '/clusters/{id}/disable', `/clusters/${id}/disable`);
    await call('GET', '/clusters/{id}', `/clusters/${id}`);
    await call('POST', '/clusters/{id}/enable', `/clusters/${id}/enable`);
    // A body on a route that takes none still meets the body guard (a form post, a fetch without a content type).
    await call('POST', '/clusters/{id}/enable', `/clusters/${id}/enable`, '{}', { 'content-type': 'text/plain;charset=UTF-8' });
    await call('POST', '/clusters/{id}/rotate-token', `/clusters/${id}/rotate-token`, 'x');
    await call('POST', '/clusters/{id}/disable', '/clusters/no-such-cluster/disable');
    await call('GET', '/clusters', '/clusters', undefined, { authorization: 'Bearer wrong' });
    peer.close();
    expect(violations).toEqual([]);
  });
});
