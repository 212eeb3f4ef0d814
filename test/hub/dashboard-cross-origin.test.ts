/**
 * Another origin can neither read the admin API nor make it act, and cannot frame the
 * dashboard. DESIGN 12: "The dashboard is served by the Worker at `/`, same origin as the admin
 * API"; README, Dashboard, Security: the token "sent as the bearer on every call", "never in a URL
 * or a cookie", "frame-ancestors 'none'", "X-Frame-Options: DENY". So no /admin answer may grant
 * CORS to another origin (a page there holding nothing could at most replay what the browser
 * attaches on its own, and the hub authenticates nothing the browser attaches on its own), a
 * preflight for the bearer must fail, and a form-like "simple" request, which needs no preflight,
 * must change nothing.
 */
import { describe, expect, it } from 'vitest';
import { useHub } from './support/hub';

const h = useHub();
const EVIL = 'https://evil.example';
const CORS_HEADERS = ['access-control-allow-origin', 'access-control-allow-credentials', 'access-control-allow-headers', 'access-control-allow-methods', 'access-control-expose-headers'];

/** The Content-Security-Policy's directives, by name. */
function policyOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const d of (res.headers.get('content-security-policy') ?? '').split(';')) {
    const [name, ...values] = d.trim().split(/\s+/);
    if (name) out[name] = values.join(' ');
  }
  return out;
}

function corsOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of CORS_HEADERS) {
    const v = res.headers.get(k);
    if (v !== null) out[k] = v;
  }
  return out;
}

describe('the admin API and the dashboard seen from another origin', () => {
  it('grants no CORS on any /admin answer, signed or not, and fails the preflight for the bearer', async () => {
    const auth = { authorization: `Bearer ${h.hub.adminToken}` };
    for (const [method, path, headers] of [
      ['GET', '/admin/clusters', auth],
      ['GET', '/admin/fleet', { ...auth, 'cache-control': 'max-age=1' }],
      ['GET', '/admin/openapi.json', {}],
      ['GET', '/admin/clusters', {}],
      ['GET', '/admin/nope', auth],
    ] as const) {
      const res = await fetch(`${h.hub.url}${path}`, { method, headers: { ...headers, origin: EVIL } });
      await res.arrayBuffer();
      expect(corsOf(res), `${method} ${path}`).toEqual({});
    }
    for (const method of ['GET', 'POST', 'PUT', 'DELETE']) {
      const pre = await fetch(`${h.hub.url}/admin/clusters`, {
        method: 'OPTIONS',
        headers: { origin: EVIL, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
      });
      await pre.arrayBuffer();
      // Without Access-Control-Allow-Origin the browser fails the preflight, whatever the status.
      expect(corsOf(pre), `preflight for ${method}`).toEqual({});
    }
  });

  it('a cross-site "simple" POST (no preflight: no bearer, a form content type) registers nothing', async () => {
    const name = `csrf-${Date.now().toString(36)}`;
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await fetch(`${h.hub.url}/admin/clusters`, { method: 'POST', headers: { origin: EVIL, 'content-type': type }, body: JSON.stringify({ name }) });
      expect(res.status, type).toBe(401);
      expect(corsOf(res), type).toEqual({});
    }
    // Not even with the token in the places a browser might carry it without script: a query or a cookie.
    const viaQuery = await fetch(`${h.hub.url}/admin/clusters?access_token=${encodeURIComponent(h.hub.adminToken)}&token=${encodeURIComponent(h.hub.adminToken)}`, { method: 'POST', headers: { 'content-type': 'application/json', cookie: `token=${h.hub.adminToken}` }, body: JSON.stringify({ name }) });
    expect(viaQuery.status).toBe(401);
    const list = await h.admin('GET', `/clusters/${name}`);
    expect(list.status).toBe(404);
  });

  it('the page and its files forbid framing and carry nosniff and no-referrer', async () => {
    for (const path of ['/', '/dashboard/app.js', '/dashboard/app.css']) {
      const res = await fetch(`${h.hub.url}${path}`, { headers: { origin: EVIL } });
      await res.arrayBuffer();
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(
        { xfo: res.headers.get('x-frame-options'), frameAncestors: /(^|;)\s*frame-ancestors 'none'\s*(;|$)/.test(csp), nosniff: res.headers.get('x-content-type-options'), referrer: res.headers.get('referrer-policy'), cors: corsOf(res) },
        path,
      ).toEqual({ xfo: 'DENY', frameAncestors: true, nosniff: 'nosniff', referrer: 'no-referrer', cors: {} });
    }
  });

  it('the page and its files carry the strict policy: nothing but their own script, style, images and admin calls', async () => {
    for (const path of ['/', '/dashboard/app.js', '/dashboard/app.css']) {
      const res = await fetch(`${h.hub.url}${path}`);
      await res.arrayBuffer();
      expect(policyOf(res), path).toEqual({
        'default-src': "'none'",
        'script-src': "'self'",
        'style-src': "'self'",
        'img-src': "'self' data:",
        'connect-src': "'self'",
        'base-uri': "'none'",
        'form-action': "'none'",
        'frame-ancestors': "'none'",
      });
    }
  });

  it('every /admin answer, signed or not, public or refused, forbids sniffing, framing and anything run in it', async () => {
    const auth = { authorization: `Bearer ${h.hub.adminToken}` };
    // The fleet answer moves with the clock (its window ends now): on a loaded machine the tag
    // can be a second old by the time it is sent back, so the 304 is asked for right after it.
    const tagged = { 'if-none-match': 'tag' };
    const send = async (method: string, path: string, headers: Record<string, string>): Promise<Response> => {
      for (let attempt = 0; ; attempt++) {
        let sent = headers;
        if ('if-none-match' in headers) {
          const fleet = await fetch(`${h.hub.url}${path}`, { headers: auth });
          await fleet.arrayBuffer();
          sent = { ...headers, 'if-none-match': fleet.headers.get('etag') ?? '' };
        }
        const res = await fetch(`${h.hub.url}${path}`, { method, headers: { ...sent, origin: EVIL }, ...(method === 'POST' ? { body: '{}' } : {}) });
        if (!('if-none-match' in headers) || res.status === 304 || attempt >= 3) return res;
        await res.arrayBuffer();
      }
    };
    for (const [method, path, headers, status] of [
      ['GET', '/admin/openapi.json', {}, 200],
      ['GET', '/admin/clusters', auth, 200],
      ['GET', '/admin/fleet', { ...auth, ...tagged }, 304],
      ['GET', '/admin/clusters', {}, 401],
      ['POST', '/admin/clusters', { ...auth, 'content-type': 'application/json' }, 400],
      ['GET', '/admin/nope', auth, 404],
    ] as const) {
      const res = await send(method, path, headers);
      await res.arrayBuffer();
      expect(
        {
          status: res.status,
          policy: policyOf(res),
          xfo: res.headers.get('x-frame-options'),
          nosniff: res.headers.get('x-content-type-options'),
          referrer: res.headers.get('referrer-policy'),
          cors: corsOf(res),
        },
        `${method} ${path}`,
      ).toEqual({
        status,
        policy: { 'default-src': "'none'", 'frame-ancestors': "'none'" },
        xfo: 'DENY',
        nosniff: 'nosniff',
        referrer: 'no-referrer',
        cors: {},
      });
    }
  });
});
