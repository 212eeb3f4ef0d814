/**
 * The admin API's answers to bad requests: always the documented JSON error shape, a 4xx that
 * names the field when the data can never be stored, never a 503 "retry" for data a retry cannot fix.
 */
import { describe, expect, it } from 'vitest';
import { desired, useHub } from './support/hub';

const h = useHub();

async function raw(method: string, path: string, body: string, contentType: string | null): Promise<{ status: number; type: string | null; json: any }> {
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
