import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, useHub } from './support/hub';

/**
 * The admin bearer with an ADMIN_TOKEN as a password manager generates one: characters outside
 * RFC 6750's token68 set (`!`, `#`, `$`, `%`, `@`). Hono's bearerAuth refused every such header
 * with 400 before comparing, so even the exact token could not be used.
 */
const TOKEN = 'Xq7!v9#Lm2@pR4$wZ8%';
const h = useHub({ ...FAST_TIMERS, ADMIN_TOKEN: TOKEN });

const as = (authorization: string | null, path: string, init: RequestInit = {}) =>
  fetch(`${h.hub.url}/admin${path}`, { ...init, headers: { ...(authorization === null ? {} : { authorization }), ...(init.headers ?? {}) } });

describe('admin auth with any printable ADMIN_TOKEN', () => {
  it('accepts the exact configured token on the reads the dashboard makes and on a write', async () => {
    for (const path of ['/fleet?hours=6', '/clusters?limit=500']) {
      const r = await h.admin('GET', path);
      expect([r.status, r.json?.error], path).toEqual([200, undefined]);
    }
    const created = await as(`Bearer ${TOKEN}`, '/clusters', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'auth-ok' }) });
    expect(created.status).toBe(201);
  });

  it('answers every other credential 401 with a Bearer challenge, whatever its shape', async () => {
    for (const authorization of [null, `Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, 'Bearer with space', `Basic ${TOKEN}`, TOKEN, 'Bearer ']) {
      const r = await as(authorization, '/clusters');
      expect([r.status, r.headers.get('www-authenticate')], String(authorization)).toEqual([401, 'Bearer realm=""']);
      expect(await r.json()).toEqual({ error: { code: 'unauthorized', message: 'a valid admin bearer token is required' } });
    }
  });
});
