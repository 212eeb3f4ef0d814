/**
 * A fault of the hub's own in an admin request (a programming error, here or relayed by name from
 * a gateway shard) answers 500 `internal`, logged as an error, with no Retry-After: the same request
 * fails the same way until the code is fixed. It was answered 503 "unavailable; retry", which a
 * script retries forever and a proxy counts as an outage. An outage still answers 503 with
 * Retry-After. The admin app's own error handler, in workerd, behind its real auth.
 */
import { createExecutionContext } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { adminApp } from '../../src/hub/admin';
import { hubEnv } from './support/peer';

const admin = adminApp();
// Routes of this test's own, behind the admin app's middleware and error handler.
admin.get('/test-fault/code', () => {
  throw new TypeError("Cannot read properties of undefined (reading 'uid')");
});
admin.get('/test-fault/relayed', () => {
  // As a gateway shard's RPC relays a TypeError: by name.
  throw Object.assign(new Error('x is not a function'), { name: 'TypeError' });
});
admin.get('/test-fault/outage', () => {
  throw new Error('no connection to the database within 1500 ms; the statement was not sent');
});

async function get(path: string): Promise<{ status: number; retryAfter: string | null; body: { error?: { code: string; message: string } } }> {
  const req = new Request(`http://hub.test${path}`, { headers: { authorization: `Bearer ${hubEnv.ADMIN_TOKEN}` } });
  const res = await admin.fetch(req, hubEnv, createExecutionContext());
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as { error?: { code: string; message: string } } };
}

describe('an admin request that fails', () => {
  it('on a fault of the hub\'s own answers 500 internal, without Retry-After, and logs an error that says it is not an outage', async () => {
    const errors = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      for (const path of ['/test-fault/code', '/test-fault/relayed']) {
        const r = await get(path);
        expect({ path, status: r.status, code: r.body.error?.code, retryAfter: r.retryAfter }).toEqual({ path, status: 500, code: 'internal', retryAfter: null });
        expect(r.body.error?.message).toContain('retrying will not help');
      }
      const lines = errors.mock.calls.map((a) => String(a[0]));
      expect(lines.filter((l) => l.includes('admin request failed: not an outage'))).toHaveLength(2);
    } finally {
      errors.mockRestore();
    }
  });

  it('control: an outage still answers 503 unavailable with Retry-After', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      const r = await get('/test-fault/outage');
      expect({ status: r.status, code: r.body.error?.code, retryAfter: r.retryAfter }).toEqual({ status: 503, code: 'unavailable', retryAfter: '5' });
    } finally {
      warn.mockRestore();
    }
  });
});
