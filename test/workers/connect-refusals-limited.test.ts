/**
 * Connects refused for an unknown enrollment token are counted per client address by the
 * rate-limit binding (wrangler.toml CONNECT_REFUSALS, simulated by the local runtime): past the
 * limit, that address is answered 429 with Retry-After and no registry lookup for the period,
 * while other addresses, and operators with valid tokens elsewhere, connect as before. An IPv6
 * address counts as its /64.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { connectVia, newCluster, worker } from './support/peer';

/** wrangler.toml: `simple = { limit = 20, period = 10 }`. */
const LIMIT = 20;

function from(addr: string, token: string): Request {
  return new Request('http://hub.test/v1/connect', {
    headers: { upgrade: 'websocket', authorization: `Bearer ${token}`, 'cf-connecting-ip': addr },
  });
}

/** One connect with a token no cluster has: 'refused' (101, error frame, 4403) or the HTTP status. */
async function unknownToken(addr: string): Promise<'refused' | Response> {
  const res = await worker.fetch(from(addr, generateEnrollmentToken()));
  if (res.status !== 101 || !res.webSocket) return res;
  const ws = res.webSocket;
  ws.accept();
  const code = await new Promise<number>((resolve) => ws.addEventListener('close', (e) => resolve(e.code)));
  expect(code).toBe(CloseCode.REFUSED);
  return 'refused';
}

describe('connects with unknown tokens, per address', () => {
  it('past the limit an address is answered 429 with Retry-After; another address, and a valid token from it, still connect', async () => {
    // The binding's period is a fixed window: start the count at the start of one, so that the
    // whole burst falls in it.
    const periodMs = 10_000;
    const intoWindow = periodMs - (Date.now() % periodMs);
    if (intoWindow < 4_000) await new Promise((r) => setTimeout(r, intoWindow + 50));

    // Addresses of this attempt's own: a retry of the test must not find them blocked already.
    const n = Math.floor(Math.random() * 0xffff);
    const flooder = `2001:db8:${n.toString(16)}:1::7`;
    const neighbour = `2001:db8:${n.toString(16)}:1:ffff::9`;
    const elsewhere = `198.51.${n >> 8}.${n & 255}`;
    const outcomes: ('refused' | number)[] = [];
    for (let i = 0; i < LIMIT + 5; i++) {
      const r = await unknownToken(flooder);
      outcomes.push(r === 'refused' ? r : r.status);
    }
    // The binding counts the refusals up to its limit; the one past it blocks the address.
    expect(outcomes.slice(0, LIMIT + 1)).toEqual(Array(LIMIT + 1).fill('refused'));
    expect(outcomes.slice(LIMIT + 1)).toEqual(Array(4).fill(429));

    // Its /64 is one address: another host in it is blocked too.
    const blocked = await worker.fetch(from(neighbour, generateEnrollmentToken()));
    expect(blocked.status).toBe(429);
    const retryAfter = Number(blocked.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(10);
    expect(await blocked.json()).toMatchObject({ error: { code: 'rate_limited' } });

    // Blocked before the lookup: a valid token from that address waits too (it backs off as from a 503).
    const c = await newCluster();
    const valid = await worker.fetch(from(flooder, c.token));
    expect(valid.status).toBe(429);

    // Another address is unaffected, whether its token is unknown or valid.
    expect(await unknownToken(elsewhere)).toBe('refused');
    const peer = await connectVia((req) => worker.fetch(new Request(req, { headers: { ...Object.fromEntries(req.headers), 'cf-connecting-ip': elsewhere } })), c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    expect(welcome.type).toBe('welcome');
    peer.close();
  });

  it('without a client address nothing is limited', async () => {
    for (let i = 0; i < LIMIT + 3; i++) {
      const res = await worker.fetch(new Request('http://hub.test/v1/connect', { headers: { upgrade: 'websocket', authorization: `Bearer ${generateEnrollmentToken()}` } }));
      expect(res.status).toBe(101);
      res.webSocket?.accept();
      res.webSocket?.close(1000);
    }
  });
});
