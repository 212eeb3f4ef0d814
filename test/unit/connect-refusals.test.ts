/**
 * The connect route's count of refusals per address (src/hub/connect-refusals.ts), as pure logic:
 * which address a connect counts under, the cap on lookups under way, and the block. The
 * rate-limit binding itself is exercised in real workerd (test/workers/connect-refusals-limited.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { addressKey, ConnectRefusals, MAX_LOOKUPS_IN_FLIGHT, REFUSAL_BLOCK_MS } from '../../src/hub/connect-refusals';

describe('addressKey', () => {
  it('an IPv4 address is its own key; none is none', () => {
    expect(addressKey('203.0.113.7')).toBe('203.0.113.7');
    expect(addressKey(null)).toBeNull();
    expect(addressKey('')).toBeNull();
  });

  it('a loopback address (the local runtime sets 127.0.0.1 for every client) is not counted', () => {
    for (const a of ['127.0.0.1', '127.8.9.10', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1']) expect(addressKey(a), a).toBeNull();
    for (const a of ['128.0.0.1', '::2', '1::1', '10.0.0.1']) expect(addressKey(a), a).not.toBeNull();
  });

  it('an IPv6 address counts as its /64, however it is written', () => {
    const key = '2001:db8:0:1::/64';
    for (const a of ['2001:db8:0:1::1', '2001:0db8:0000:0001:ffff:ffff:ffff:ffff', '2001:DB8::1:0:0:0:9', '2001:db8:0:1:1::', '2001:db8:0:1::ffff:192.0.2.1']) {
      expect(addressKey(a), a).toBe(key);
    }
    expect(addressKey('2001:db8:0:2::1')).toBe('2001:db8:0:2::/64');
    expect(addressKey('::2')).toBe('0:0:0:0::/64');
  });

  it('what does not parse is its own key (never merged with another)', () => {
    for (const a of ['1::2::3', '2001:db8:zz:1::1', '1:2:3:4:5:6:7:8:9', '1:2:3']) expect(addressKey(a), a).toBe(a);
  });
});

describe('ConnectRefusals', () => {
  const over = { limit: async () => ({ success: false }) };
  const under = { limit: async () => ({ success: true }) };

  it('an address put over the limit is blocked for the period, then let through', async () => {
    const r = new ConnectRefusals();
    expect(await r.refused(under, 'a', 1_000)).toBe(false);
    expect(r.blockedFor('a', 1_000)).toBe(0);
    expect(await r.refused(over, 'a', 1_000)).toBe(true);
    expect(r.blockedFor('a', 1_000)).toBe(REFUSAL_BLOCK_MS);
    expect(r.blockedFor('b', 1_000)).toBe(0);
    expect(r.blockedFor('a', 1_000 + REFUSAL_BLOCK_MS)).toBe(0);
  });

  it('no binding, no address, or a binding that fails: nothing is blocked', async () => {
    const r = new ConnectRefusals();
    expect(await r.refused(undefined, 'a')).toBe(false);
    expect(await r.refused(over, null)).toBe(false);
    expect(await r.refused({ limit: async () => Promise.reject(new Error('down')) }, 'a')).toBe(false);
    expect(r.blockedFor('a')).toBe(0);
  });

  it('at most MAX_LOOKUPS_IN_FLIGHT lookups under way per address; each that ends frees its place', () => {
    const r = new ConnectRefusals();
    for (let i = 0; i < MAX_LOOKUPS_IN_FLIGHT; i++) expect(r.enter('a')).toBe(true);
    expect(r.enter('a')).toBe(false);
    expect(r.enter('b')).toBe(true);
    expect(r.enter(null)).toBe(true);
    r.leave('a');
    expect(r.enter('a')).toBe(true);
    expect(r.enter('a')).toBe(false);
  });
});
