/**
 * A hub configured with an ADMIN_TOKEN no HTTP header can carry (non-ASCII, a space at either end,
 * a line break) could never be signed in to: it answers every admin request 503 `unconfigured`,
 * saying what is wrong with the configuration and never echoing the token. And a var out of its
 * bounds fails every request alike (README "Configuration"), 503 `unconfigured` naming the var:
 * an admin read once took it for a database outage (a warning and "retry"), /healthz answered a
 * bare 500, and the dashboard's files were served as if nothing were wrong.
 */
import { createExecutionContext } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { hubApp } from '../../src/hub/app';
import { hubEnv } from './support/peer';

const app = hubApp();

async function adminGet(configured: string, sent: string): Promise<{ status: number; body: string }> {
  const req = new Request('http://hub.test/admin/clusters', { headers: { authorization: `Bearer ${sent}` } });
  const res = await app.fetch(req, { ...hubEnv, ADMIN_TOKEN: configured }, createExecutionContext());
  return { status: res.status, body: await res.text() };
}

describe('an ADMIN_TOKEN no header can carry', () => {
  it('answers 503 unconfigured with a JSON body that names the problem, not the token', async () => {
    for (const configured of ['s3cr\u00e9t-token', ' s3cret-leading', 's3cret-trailing ', 's3cret\nnext-line']) {
      // The closest a client could send: the token without what no header carries.
      const r = await adminGet(configured, configured.trim().replace(/[^\x21-\x7e]/g, ''));
      expect({ status: r.status, error: JSON.parse(r.body).error?.code }, JSON.stringify(configured)).toEqual({ status: 503, error: 'unconfigured' });
      expect(r.body).not.toContain('s3cr');
    }
  });

  it('control: a printable token with !#$% is checked as usual (a wrong one is 401)', async () => {
    const r = await adminGet('s3cret!#$%&*', 'not-it');
    expect(r.status).toBe(401);
  });
});

describe('a var out of its bounds', () => {
  it('fails every request alike: 503 unconfigured naming the var, logged once as an error, not as a database outage', async () => {
    const lines: string[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void lines.push(a.map(String).join(' ')));
    const warned = vi.spyOn(console, 'warn').mockImplementation((...a: unknown[]) => void lines.push(`WARN ${a.map(String).join(' ')}`));
    try {
      for (const path of ['/admin/clusters', '/healthz', '/v1/connect', '/admin/openapi.json', '/']) {
        const req = new Request(`http://hub.test${path}`, { headers: { authorization: `Bearer ${hubEnv.ADMIN_TOKEN}` } });
        const res = await app.fetch(req, { ...hubEnv, PING_INTERVAL_MS: '500' }, createExecutionContext());
        const body = (await res.json()) as { error?: { code: string; message: string; field?: string } };
        expect({ path, status: res.status, error: body.error }).toEqual({
          path,
          status: 503,
          error: { code: 'unconfigured', message: expect.stringContaining('PING_INTERVAL_MS') as unknown as string, field: 'PING_INTERVAL_MS' },
        });
      }
    } finally {
      spy.mockRestore();
      warned.mockRestore();
    }
    expect(lines.filter((l) => l.includes('invalid hub configuration'))).toHaveLength(1);
    expect(lines.filter((l) => l.includes('database unavailable'))).toEqual([]);
  });
});
