/**
 * Bad input on the cluster lifecycle routes (create, rotate-token, disable, enable, PATCH, wrong
 * methods, credentials) gets a typed JSON error with a 4xx status and changes nothing.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS });

async function raw(method: string, path: string, init: { body?: string; auth?: string | null; ctype?: string } = {}) {
  const headers: Record<string, string> = {};
  const auth = init.auth === undefined ? `Bearer ${h.hub.adminToken}` : init.auth;
  if (auth !== null) headers.authorization = auth;
  if (init.body !== undefined) headers['content-type'] = init.ctype ?? 'application/json';
  const res = await fetch(`${h.hub.url}/admin${path}`, { method, headers, ...(init.body !== undefined ? { body: init.body } : {}) });
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = { unparsable: text.slice(0, 200) };
  }
  return { status: res.status, json, ctype: res.headers.get('content-type') };
}

const typed = (r: { status: number; json: any }) => ({ status: r.status, code: typeof r.json?.error?.code });

describe('cluster names of odd shapes are refused 400 with a typed JSON error, and nothing is stored', () => {
  const bad = ['', 'UPPER', 'a_b', '-lead', 'trail-', 'a'.repeat(64), 'ünï', 'a b', 'a/b', 'a.b', '01ARZ3NDEKTSV4RRFFQ5G5FAV9', 'x'.repeat(10_000)];
  for (const name of bad) {
    it(`POST /clusters {"name": ${JSON.stringify(name.length > 30 ? name.slice(0, 10) + `…(${name.length})` : name)}} → 400 naming name`, async () => {
      const r = await raw('POST', '/clusters', { body: JSON.stringify({ name }) });
      expect({ status: r.status, code: r.json?.error?.code, field: r.json?.error?.field }).toEqual({ status: 400, code: 'invalid', field: 'name' });
      expect(await h.sql('select 1 from clusters where name = $1', [name])).toEqual([]);
    });
  }

  it('POST /clusters with no name, a number name, or an extra unknown field', async () => {
    const missing = await raw('POST', '/clusters', { body: '{}' });
    expect(typed(missing)).toEqual({ status: 400, code: 'string' });
    const num = await raw('POST', '/clusters', { body: '{"name": 5}' });
    expect(typed(num)).toEqual({ status: 400, code: 'string' });
    const extra = await raw('POST', '/clusters', { body: JSON.stringify({ name: 'rl-extra-field', enrollment_token: 'wsmet_mine', uid: 'X' }) });
    // Refused by name, not dropped or honoured.
    expect(typed(extra)).toEqual({ status: 400, code: 'string' });
    expect(extra.json.error.field).toBe('enrollment_token');
    expect(await h.sql('select 1 from clusters where name = $1', ['rl-extra-field'])).toEqual([]);
  });

  it('a lowercase name shaped like a ULID is a name: it addresses only itself, by name, and the uid addresses the cluster by uid', async () => {
    const other = await h.newCluster('rl');
    const lower = other.uid.toLowerCase();
    const r = await raw('POST', '/clusters', { body: JSON.stringify({ name: lower }) });
    expect(r.status).toBe(201);
    const byUid = await h.admin('GET', `/clusters/${other.uid}`);
    const byLower = await h.admin('GET', `/clusters/${lower}`);
    expect({ byUid: byUid.json.uid, byLower: byLower.json.uid }).toEqual({ byUid: other.uid, byLower: r.json.uid });
    // A rotation by the lowercase name rotates only that cluster.
    const rot = await h.admin('POST', `/clusters/${lower}/rotate-token`);
    expect(rot.status).toBe(200);
    const again = await h.admin('GET', `/clusters/${other.uid}`);
    expect(again.json.token_issued_at ?? null).toBe(byUid.json.token_issued_at ?? null);
  });
});

describe('cluster {id} of odd shapes on lifecycle routes', () => {
  const ids = ['does-not-exist', 'ÜNICODE-ü', '%F0%9F%98%80', 'a%20b', '01ARZ3NDEKTSV4RRFFQ5G5FAV9'];
  for (const id of ids) {
    for (const action of ['rotate-token', 'disable', 'enable']) {
      it(`POST /clusters/${id}/${action} → 404 typed JSON`, async () => {
        const r = await raw('POST', `/clusters/${id}/${action}`);
        expect({ status: r.status, code: r.json?.error?.code }).toEqual({ status: 404, code: 'not_found' });
      });
    }
  }
  it('an id over 253 characters → 400 naming id on rotate-token, disable, PATCH', async () => {
    const long = 'a'.repeat(254);
    for (const [m, p, body] of [['POST', `/clusters/${long}/rotate-token`], ['POST', `/clusters/${long}/disable`], ['PATCH', `/clusters/${long}`, '{"location_hint":null}']] as const) {
      const r = await raw(m, p, body ? { body } : {});
      expect({ p: `${m} ${p.slice(0, 20)}`, status: r.status, field: r.json?.error?.field }).toEqual({ p: `${m} ${p.slice(0, 20)}`, status: 400, field: 'id' });
    }
  });
});

describe('wrong methods and missing routes answer typed JSON and change nothing', () => {
  it('DELETE /clusters/{id} (no such route): JSON error, the cluster stays and its token still works', async () => {
    const c = await h.newCluster('rl');
    const r = await raw('DELETE', `/clusters/${c.name}`);
    expect({ status: r.status >= 400 && r.status < 500, code: typeof r.json?.error?.code }).toEqual({ status: true, code: 'string' });
    expect((await h.admin('GET', `/clusters/${c.uid}`)).status).toBe(200);
  });

  for (const [m, suffix] of [['GET', 'rotate-token'], ['PUT', 'rotate-token'], ['DELETE', 'disable'], ['GET', 'enable']] as const) {
    it(`${m} /clusters/{id}/${suffix}: JSON error, and nothing changes`, async () => {
      const c = await h.newCluster('rl');
      const before = await h.sql('select token_hash, disabled_at from clusters where uid = $1', [c.uid]);
      const r = await raw(m, `/clusters/${c.name}/${suffix}`, m === 'PUT' ? { body: '{}' } : {});
      expect({ status: r.status >= 400 && r.status < 500, ctype: r.ctype?.includes('json'), code: typeof r.json?.error?.code }).toEqual({ status: true, ctype: true, code: 'string' });
      expect(await h.sql('select token_hash, disabled_at from clusters where uid = $1', [c.uid])).toEqual(before);
    });
  }

  it('PATCH /clusters/{id} with {} (location_hint missing), an unknown hint, or a non-JSON body: 400 typed, placement unchanged', async () => {
    const c = await h.newCluster('rl');
    const before = await h.sql('select location_hint, placement_generation from clusters where uid = $1', [c.uid]);
    for (const body of ['{}', '{"location_hint":"mars"}', '{"location_hint":5}', 'nope']) {
      const r = await raw('PATCH', `/clusters/${c.name}`, { body });
      expect({ body, ...typed(r) }).toEqual({ body, status: 400, code: 'string' });
    }
    expect(await h.sql('select location_hint, placement_generation from clusters where uid = $1', [c.uid])).toEqual(before);
  });

  it('PATCH with an extra field besides location_hint (e.g. "disabled": true, "name") does not change those', async () => {
    const c = await h.newCluster('rl');
    const r = await raw('PATCH', `/clusters/${c.name}`, { body: JSON.stringify({ location_hint: null, disabled: true, name: 'renamed-x' }) });
    const [row] = await h.sql<{ name: string; disabled: boolean }>('select name, disabled_at is not null as disabled from clusters where uid = $1', [c.uid]);
    expect(row).toEqual({ name: c.name, disabled: false });
    expect(r.status).toBe(400);
    expect(r.json.error.field).toBe('disabled');
  });
});

describe('Authorization on lifecycle routes', () => {
  it('a cluster enrollment token is not an admin credential (rotate-token, disable): 401 JSON, nothing changes', async () => {
    const c = await h.newCluster('rl');
    const before = await h.sql('select token_hash, disabled_at from clusters where uid = $1', [c.uid]);
    for (const p of [`/clusters/${c.name}/rotate-token`, `/clusters/${c.name}/disable`]) {
      const r = await raw('POST', p, { auth: `Bearer ${c.token}` });
      expect({ p, status: r.status, code: r.json?.error?.code }).toEqual({ p, status: 401, code: 'unauthorized' });
    }
    expect(await h.sql('select token_hash, disabled_at from clusters where uid = $1', [c.uid])).toEqual(before);
  });

  it('wrong schemes and malformed admin credentials are 401 on rotate-token', async () => {
    const c = await h.newCluster('rl');
    const t = h.hub.adminToken;
    for (const auth of [`Basic ${t}`, `Token ${t}`, `Bearer${t}`, `Bearer ${t} extra`, `Bearer "${t}"`, `${t}`, `Bearer ${t},Bearer ${t}`]) {
      const r = await raw('POST', `/clusters/${c.name}/rotate-token`, { auth });
      expect({ auth: auth.replace(t, 'T'), status: r.status }).toEqual({ auth: auth.replace(t, 'T'), status: 401 });
    }
  });

  it('the admin token on /v1/connect is refused 401 before the upgrade', async () => {
    const res = await fetch(`${h.hub.url}/v1/connect`, { headers: { authorization: `Bearer ${h.hub.adminToken}` } });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
  });
});
