/**
 * What a client of the admin reads is told matches what the hub answers: openapi.json documents
 * the poll cache's ETag and 304 (and the If-None-Match they answer) on every GET and the 400 of an
 * invalid {id}, and a cluster reference no cluster can have (a NUL in {id} or in ?after=) is
 * refused by the hub with a 400 naming the field, never passed on for Postgres to refuse.
 */
import { describe, expect, it } from 'vitest';
import { useHub } from './support/hub';

const h = useHub();

async function get(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${h.hub.url}/admin${path}`, { headers: { authorization: `Bearer ${h.hub.adminToken}`, ...headers } });
  const text = await res.text();
  return { status: res.status, etag: res.headers.get('etag'), json: text ? JSON.parse(text) : null };
}

async function openapi(): Promise<any> {
  return (await fetch(`${h.hub.url}/admin/openapi.json`)).json();
}

describe('OpenAPI describes the answers every GET actually gives', () => {
  it('every GET documents the 304 it answers to If-None-Match (README: "Every 200 JSON answer to a GET carries an ETag; If-None-Match with it gets 304")', async () => {
    const c = await h.newCluster('oa');
    // The behaviour is there: a GET answers 304 to its own ETag.
    const first = await get(`/clusters/${c.name}/nodes`);
    expect(first.etag).toMatch(/^"/);
    const again = await get(`/clusters/${c.name}/nodes`, { 'if-none-match': first.etag as string });
    expect(again.status).toBe(304);

    // …but a client generated from openapi.json is told nothing of it.
    const doc = await openapi();
    const undocumented: string[] = [];
    for (const [path, ops] of Object.entries<any>(doc.paths)) {
      const op = ops.get;
      if (!op) continue;
      const has304 = op.responses['304'] !== undefined;
      const hasEtag = op.responses['200']?.headers?.etag !== undefined || op.responses['200']?.headers?.ETag !== undefined;
      const hasIfNoneMatch = (op.parameters ?? []).some((p: any) => p.in === 'header' && p.name.toLowerCase() === 'if-none-match');
      if (!has304 || !hasEtag || !hasIfNoneMatch) {
        undocumented.push(`GET ${path}${has304 ? '' : ' (no 304)'}${hasEtag ? '' : ' (no ETag header on 200)'}${hasIfNoneMatch ? '' : ' (no If-None-Match)'}`);
      }
    }
    expect(undocumented).toEqual([]);
  });

  it('GET /clusters marks its deprecated ?after= and its deprecated answer keys deprecated (README: "marked deprecated in OpenAPI")', async () => {
    const doc = await openapi();
    const op = doc.paths['/clusters'].get;
    const after = (op.parameters ?? []).find((p: any) => p.in === 'query' && p.name === 'after');
    expect(after?.deprecated, JSON.stringify(after)).toBe(true);
    expect((op.parameters ?? []).find((p: any) => p.in === 'query' && p.name === 'cursor')?.deprecated).toBeUndefined();
    const page = doc.components.schemas.ClusterPage.properties;
    expect([page.clusters.deprecated, page.next.deprecated]).toEqual([true, true]);
  });

  it('GET /clusters/{id} and GET /clusters/{id}/session/wakes document the 400 they answer for an invalid {id}', async () => {
    const long = 'x'.repeat(254);
    for (const p of [`/clusters/${long}`, `/clusters/${long}/session/wakes`]) {
      const r = await get(p);
      expect([r.status, r.json?.error?.field], p).toEqual([400, 'id']);
    }
    const doc = await openapi();
    expect(Object.keys(doc.paths['/clusters/{id}'].get.responses)).toContain('400');
    expect(Object.keys(doc.paths['/clusters/{id}/session/wakes'].get.responses)).toContain('400');
  });
});

describe('a cluster reference no cluster can have is refused by the hub, not by the database', () => {
  // A NUL cannot be in any name or uid (names are [a-z0-9-], uids ULIDs), so the answer is known
  // without a round trip. Today the value is bound into the statement and Postgres' refusal
  // (SQLSTATE 22021) comes back as a 400 without a field, its text quoting the database, and
  // logged as "refused by the database". The hub already does this for a forged cursor
  // (admin-reads.test.ts: "a 400 naming cursor, not a database refusal").
  const reads = ['', '/deployments', '/nodes', '/devices', '/events', '/rejections', '/operations', '/connections', '/session/wakes'];

  it('a NUL in {id} is a 404 no such cluster (or a 400 naming id) on every GET /clusters/{id}/..., never a database refusal', async () => {
    for (const r of reads) {
      const p = `/clusters/a%00b${r}`;
      const res = await get(p);
      const ok = res.status === 404 ? res.json?.error?.code === 'not_found' : res.status === 400 && res.json?.error?.field === 'id';
      expect(ok, `${p}: ${res.status} ${JSON.stringify(res.json)}`).toBe(true);
      expect(res.json?.error?.message, p).not.toMatch(/database|22021|UTF8/);
    }
  });

  it('a NUL in the deprecated ?after= of GET /clusters is a 400 naming after, not a database refusal', async () => {
    const res = await get('/clusters?after=a%00b');
    expect([res.status, res.json?.error?.code, res.json?.error?.field], JSON.stringify(res.json)).toEqual([400, 'invalid', 'after']);
  });
});
