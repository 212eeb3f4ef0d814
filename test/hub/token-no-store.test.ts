/**
 * An enrollment token is shown once, in the answer that creates it (POST /admin/clusters) or
 * rotates it (POST …/rotate-token): those answers say `Cache-Control: no-store`, so no cache
 * between the plane and the hub (a proxy, a browser's disk cache) keeps a copy of the secret.
 */
import { describe, expect, it } from 'vitest';
import { uniqueName } from '../support/peer-core';
import { useHub } from './support/hub';

const h = useHub();

async function post(path: string, body?: unknown): Promise<Response> {
  return fetch(`${h.hub.url}/admin${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.hub.adminToken}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
}

describe('answers that carry an enrollment token are never stored by a cache', () => {
  it('POST /admin/clusters and POST …/rotate-token answer Cache-Control: no-store', async () => {
    const name = uniqueName('nostore');
    const created = await post('/clusters', { name });
    expect(created.status).toBe(201);
    expect(((await created.json()) as { enrollment_token: string }).enrollment_token).toMatch(/^wsmet_/);
    expect(created.headers.get('cache-control')).toBe('no-store');
    const rotated = await post(`/clusters/${name}/rotate-token`);
    expect(rotated.status).toBe(200);
    expect(rotated.headers.get('cache-control')).toBe('no-store');
  });
});
