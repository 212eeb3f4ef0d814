/**
 * GET /admin/openapi.json needs no token, and generating the description walks every schema of
 * the API (milliseconds of CPU): it is generated once per isolate and served from then on, so an
 * unauthenticated caller cannot make the hub spend that per request.
 */
import { describe, expect, it, vi } from 'vitest';
import { adminApp } from '../../src/hub/admin/index';

describe('the admin API description', () => {
  it('is generated once per isolate and served identically to every later request, without a token', async () => {
    const admin = adminApp();
    const generate = vi.spyOn(admin, 'getOpenAPIDocument');
    const bodies: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await admin.request('/openapi.json');
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      bodies.push(await res.text());
    }
    expect(generate).toHaveBeenCalledTimes(1);
    expect(new Set(bodies).size).toBe(1);
    const doc = JSON.parse(bodies[0] as string) as { openapi: string; servers: { url: string }[]; paths: Record<string, unknown> };
    expect(doc.openapi).toBe('3.0.3');
    expect(doc.servers).toEqual([{ url: '/admin' }]);
    // The description is whole: routes registered after the route that serves it are in it.
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/clusters', '/clusters/{id}/deployments/{deployment_id}', '/fleet']));
  });
});
