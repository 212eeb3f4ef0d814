/**
 * A hub configured with an ADMIN_TOKEN no HTTP header can carry (non-ASCII, a space at either end,
 * a line break) could never be signed in to: it answers every admin request 503 `unconfigured`,
 * saying what is wrong with the configuration and never echoing the token.
 */
import { createExecutionContext } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
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
