import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { generateEnrollmentToken, hashToken, isEnrollmentTokenShaped, TOKEN_PREFIX, toHex } from '../../src/hub/tokens';

describe('enrollment tokens', () => {
  it('carry a recognisable prefix and 256 bits of randomness (43 base62 characters), plus a checksum', () => {
    const t = generateEnrollmentToken();
    expect(t.startsWith(TOKEN_PREFIX)).toBe(true);
    expect(t).toMatch(/^wsmet_[0-9A-Za-z]{49}$/);
    expect(62 ** 43).toBeGreaterThan(2 ** 256);
    expect(new Set(Array.from({ length: 200 }, generateEnrollmentToken)).size).toBe(200);
  });

  it('a generated token is shaped like one', () => {
    for (let i = 0; i < 100; i++) expect(isEnrollmentTokenShaped(generateEnrollmentToken())).toBe(true);
  });

  it('a mistyped token (any single character changed) is rejected from its shape alone', () => {
    const t = generateEnrollmentToken();
    fc.assert(
      fc.property(fc.integer({ min: TOKEN_PREFIX.length, max: t.length - 1 }), fc.constantFrom(...'0123456789abcXYZ'), (i, ch) => {
        fc.pre(t[i] !== ch);
        expect(isEnrollmentTokenShaped(t.slice(0, i) + ch + t.slice(i + 1))).toBe(false);
      }),
    );
  });

  it('anything else is not token-shaped: wrong prefix, length, alphabet, the admin token', () => {
    const t = generateEnrollmentToken();
    for (const bad of ['', 'wsmet_', t.slice(1), `x${t}`, t.toUpperCase(), t.replace('wsmet_', 'wsmxt_'), `${t}0`, t.slice(0, -1), 'test-admin-token']) {
      expect(isEnrollmentTokenShaped(bad), bad).toBe(false);
    }
  });

  it('is stored only as its SHA-256', async () => {
    const h = await hashToken('wsmet_example');
    expect(h).toHaveLength(32);
    expect(toHex(h)).toBe('691a8e1e6dab1e5e9683f3a98185b7d617a19f9d710988e6293b80ba38510eaf');
  });
});
