/**
 * A chunked admin body (no Content-Length) is refused with 413 as soon as it passes the limit,
 * not read to its end first: read whole, a body of any size was held in memory before the check.
 * In-process, so what is measured is how much of the body the hub pulled before it answered (a
 * test over wrangler's dev server met its ProxyWorker, which under load reports the early answer
 * to a body it is still relaying as "Your worker restarted mid-request", a dev-only 503).
 */
import { describe, expect, it } from 'vitest';
import { hubEnv, newCluster, worker } from './support/peer';

const LIMIT = 16 << 20;

describe('admin body size', () => {
  it('a chunked body is refused with 413 once it passes the limit, not read to its end first', async () => {
    const c = await newCluster('body-limit');
    const chunk = new Uint8Array(1 << 20).fill(0x20);
    // Far past the limit: a hub that reads the whole body before its check pulls all of it.
    const total = 256 << 20;
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>(
      {
        pull(ctrl) {
          if (pulled >= total) return ctrl.close();
          pulled += chunk.length;
          ctrl.enqueue(chunk);
        },
      },
      { highWaterMark: 0 },
    );
    const res = await worker.fetch(`http://hub.test/admin/clusters/${c.name}/deployments`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${hubEnv.ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body,
    });
    const pulledBefore = pulled;
    const text = await res.text();
    expect(res.status, text).toBe(413);
    expect(JSON.parse(text).error).toMatchObject({ code: 'payload_too_large' });
    expect(pulledBefore).toBeGreaterThan(LIMIT);
    expect(pulledBefore).toBeLessThan(LIMIT * 4);
  });
});
