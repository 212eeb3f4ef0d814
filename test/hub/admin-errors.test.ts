/**
 * The admin API's answers to bad requests: always the documented JSON error shape, a 4xx that
 * names the field when the data can never be stored, never a 503 "retry" for data a retry cannot fix.
 */
import { describe, expect, it } from 'vitest';
import { desired, useHub } from './support/hub';

// Bodies the hub refuses before it has read them whole are drained before the answer goes out,
// by the suite's build as by wrangler's dev server (test/support/prebuilt-hub.ts, ENTRY).
const h = useHub();

async function raw(method: string, path: string, body: string | Uint8Array, contentType: string | null): Promise<{ status: number; type: string | null; json: any }> {
  const res = await fetch(`${h.hub.url}/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${h.hub.adminToken}`, ...(contentType ? { 'content-type': contentType } : {}) },
    body,
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, type: res.headers.get('content-type'), json };
}

describe('admin API error shapes', () => {
  it('a NUL in a string is refused with 400 naming the field, not 503', async () => {
    const c = await h.newCluster();
    const r = await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired({ serving: { ...desired().serving, model: 'llama\u0000' } }));
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'invalid', field: 'serving.model' });
  });

  it('a lone surrogate (not storable as JSON text) is refused with 400 naming the field', async () => {
    const c = await h.newCluster();
    const r = await raw('PUT', `/clusters/${c.name}/deployments/d1`, JSON.stringify(desired({ workload_id: 'w1' })).replace('"img:1"', '"img\\ud800"'), 'application/json');
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'invalid', field: 'serving.image' });
  });

  it('a body that is not UTF-8 (an env value in Latin-1) is refused with 400, not stored with U+FFFD in place of what was sent', async () => {
    const c = await h.newCluster();
    const [before, after] = JSON.stringify(desired()).split('"env":{}');
    // "café" as a Latin-1 file holds it: 0xE9 alone is no UTF-8 character.
    const body = new Uint8Array([...Buffer.from(`${before}"env":{"GREETING":"caf`), 0xe9, ...Buffer.from(`"}${after}`)]);
    const r = await raw('PUT', `/clusters/${c.name}/deployments/d1`, body, 'application/json');
    expect([r.status, r.json.error?.code], JSON.stringify(r.json)).toEqual([400, 'invalid']);
    expect(r.json.error.message).toMatch(/UTF-8/);
    expect((await h.admin('GET', `/clusters/${c.name}/deployments`)).json.items).toEqual([]);
  });

  it('__proto__ as a key in serving.env is refused with 400 instead of being dropped', async () => {
    const c = await h.newCluster();
    const body = JSON.stringify(desired()).replace('"env":{}', '"env":{"__proto__":"x","A":"1"}');
    const r = await raw('PUT', `/clusters/${c.name}/deployments/d1`, body, 'application/json');
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'invalid', field: 'serving.env.__proto__' });
    expect((await h.admin('GET', `/clusters/${c.name}/deployments`)).json.items).toEqual([]);
  });

  it('a malformed JSON body answers the JSON error shape', async () => {
    const r = await raw('POST', '/clusters', '{"name": ', 'application/json');
    expect(r.status).toBe(400);
    expect(r.type).toMatch(/application\/json/);
    expect(r.json.error).toMatchObject({ code: 'invalid', message: expect.stringMatching(/not valid JSON/) });
  });

  it('a body that is not application/json answers 415 in the JSON error shape', async () => {
    const r = await raw('POST', '/clusters', '{"name":"x-1"}', 'text/plain');
    expect(r.status).toBe(415);
    expect(r.type).toMatch(/application\/json/);
    expect(r.json.error).toMatchObject({ code: 'unsupported_media_type' });
    const none = await raw('POST', '/clusters', 'name=x-1', null);
    expect(none.status).toBe(415);
  });

  it('a bulk body over what the hub can relay (5,000 valid items, ~42 MB) is refused with 413 payload_too_large, not 503 "retry", and nothing is stored', async () => {
    const c = await h.newCluster();
    const env = { A: 'x'.repeat(4096), B: 'y'.repeat(4096) };
    const deployments = Array.from({ length: 5000 }, (_, i) => ({ deployment_id: `d${i}`, ...desired({ serving: { ...desired().serving, env } }) }));
    // The hub answers before the upload ends; on a loaded machine the client can see the
    // connection's end before that answer ("fetch failed"), which is the transport's, not an answer.
    let put: Awaited<ReturnType<typeof h.admin>> | undefined;
    for (let attempt = 0; put === undefined; attempt++) {
      try {
        put = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments });
      } catch (err) {
        if (attempt >= 2) throw err;
      }
    }
    expect(put.status, JSON.stringify(put.json)).toBe(413);
    expect(put.json.error).toMatchObject({ code: 'payload_too_large' });
    expect(await h.sql('select 1 from desired_deployments where cluster_uid = $1', [c.uid])).toEqual([]);
  }, 60_000);

  it('a body just over the documented 16 MiB limit is refused with 413 even when its content is small (whitespace), and one at the limit is read', async () => {
    const c = await h.newCluster();
    const item = JSON.stringify({ deployments: [{ deployment_id: 'd1', ...desired() }] });
    const limit = 16 << 20;
    const over = await raw('PUT', `/clusters/${c.name}/deployments`, item + ' '.repeat(limit - item.length + 1), 'application/json');
    expect(over.status).toBe(413);
    expect(over.json.error).toMatchObject({ code: 'payload_too_large' });
    const at = await raw('PUT', `/clusters/${c.name}/deployments`, item + ' '.repeat(limit - item.length), 'application/json');
    expect(at.status, JSON.stringify(at.json)).toBe(200);
  }, 30_000);

  it('openapi.json documents the 415 and 413 the body guard answers on every route that takes a JSON body', async () => {
    const doc = (await (await fetch(`${h.hub.url}/admin/openapi.json`)).json()) as { paths: Record<string, Record<string, { requestBody?: unknown; responses: Record<string, unknown> }>> };
    const undocumented: string[] = [];
    let withBody = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (!op.requestBody) continue;
        withBody++;
        for (const status of ['413', '415']) if (!op.responses[status]) undocumented.push(`${status} ${method} ${path}`);
      }
    }
    expect(withBody).toBeGreaterThanOrEqual(4);
    expect(undocumented).toEqual([]);
    expect(JSON.stringify(doc.paths['/clusters/{id}/deployments/{deployment_id}']?.put?.responses['413'])).toContain('too_large');
  });

  it('openapi.json declares the headers the hub answers with (Retry-After on a 503, the Bearer challenge on a 401), strict request bodies, and integer revisions', async () => {
    const doc = (await (await fetch(`${h.hub.url}/admin/openapi.json`)).json()) as any;
    const put = doc.paths['/clusters/{id}/deployments/{deployment_id}'].put;
    expect(put.responses['503'].headers['Retry-After'].schema.type).toBe('integer');
    expect(put.responses['401'].headers['WWW-Authenticate']).toBeDefined();
    const body = doc.components.schemas.DesiredDeployment;
    expect(body.additionalProperties).toBe(false);
    expect(body.properties.serving.additionalProperties).toBe(false);
    const written = put.responses['200'].content['application/json'].schema;
    const resolved = written.$ref ? doc.components.schemas[written.$ref.split('/').pop()] : written;
    expect(resolved.properties.revision.type).toBe('integer');
  });

  it('a route called with a method it does not take is 405 with an Allow header and the JSON error shape, not 404; a path no route has stays 404', async () => {
    const c = await h.newCluster();
    const call = async (method: string, path: string, token: string | null = h.hub.adminToken) => {
      const res = await fetch(`${h.hub.url}/admin${path}`, { method, headers: token ? { authorization: `Bearer ${token}` } : {} });
      return { status: res.status, allow: res.headers.get('allow'), type: res.headers.get('content-type'), json: (await res.json()) as any };
    };
    for (const [method, path, allow] of [
      ['DELETE', '/clusters', 'GET, HEAD, POST'],
      ['PUT', `/clusters/${c.name}`, 'GET, HEAD, PATCH'],
      ['GET', `/clusters/${c.name}/rotate-token`, 'POST'],
      ['POST', `/clusters/${c.name}/deployments/d1`, 'PUT, DELETE'],
      ['PATCH', '/openapi.json', 'GET, HEAD'],
    ] as const) {
      const r = await call(method, path);
      expect({ status: r.status, allow: r.allow, type: r.type, code: r.json.error?.code }, `${method} ${path}`).toEqual({
        status: 405,
        allow,
        type: expect.stringMatching(/application\/json/),
        code: 'method_not_allowed',
      });
      expect(r.json.error.message).toContain(method);
    }
    // Nothing changed, and no route is revealed to a caller without the token.
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    expect((await call('DELETE', '/clusters', null)).status).toBe(401);
    const none = await call('GET', '/no-such-route');
    expect({ status: none.status, allow: none.allow, code: none.json.error?.code }).toEqual({ status: 404, allow: null, code: 'not_found' });
  });

  it('a POST with no body where none is needed still works', async () => {
    const c = await h.newCluster();
    const r = await raw('POST', `/clusters/${c.name}/disable`, '', null);
    expect(r.status).toBe(200);
    expect(r.json.disabled).toBe(true);
  });

  it('GET /admin/clusters answers {items, next_cursor} like every other list, and the cursor walks each cluster once', async () => {
    for (let i = 0; i < 3; i++) await h.newCluster('page');
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await h.admin('GET', `/clusters?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status).toBe(200);
      // The old keys stay for one release.
      expect(r.json.clusters).toEqual(r.json.items);
      seen.push(...r.json.items.map((x: { uid: string }) => x.uid));
      cursor = r.json.next_cursor;
      pages++;
    } while (cursor && pages < 100);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBeGreaterThanOrEqual(3);
    const bad = await h.admin('GET', '/clusters?cursor=nonsense');
    expect(bad.status).toBe(400);
    expect(bad.json.error.field).toBe('cursor');
  });
});
