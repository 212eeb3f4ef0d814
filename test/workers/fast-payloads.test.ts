/**
 * The fast validators against zod inside workerd, where they are used: zod cannot compile there
 * (no eval), so this is its interpreted path on workerd's own V8. The full proof runs in Node
 * (test/unit/protocol/fast-payloads.property.test.ts, zod compiled and jitless); this repeats
 * the generated-payload half of it here.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CATALOG, decodePayload, decodePayloadWithZod } from '../../src/protocol';
import { HOT_TYPES } from '../../src/protocol/fast-payloads';
import { arbitraryOf } from '../unit/protocol/support/schema-arbitraries';

describe('fast validators in workerd', () => {
  it('zod has no compiled path here (the reason the fast validators exist)', () => {
    expect((globalThis as { navigator?: { userAgent?: string } }).navigator?.userAgent).toContain('Cloudflare');
  });

  for (const type of HOT_TYPES) {
    it(`${type}: decodePayload answers exactly as zod does`, () => {
      let accepted = 0;
      fc.assert(
        fc.property(arbitraryOf(CATALOG[type].schema), (input) => {
          const fast = decodePayload(type, input);
          const ref = decodePayloadWithZod(type, input);
          expect(fast.ok).toBe(ref.ok);
          if (fast.ok && ref.ok) {
            expect(fast.message).toStrictEqual(ref.message);
            expect(JSON.stringify(fast.message)).toBe(JSON.stringify(ref.message));
            accepted++;
          }
        }),
        { numRuns: 400 },
      );
      expect(accepted).toBeGreaterThan(20);
    });
  }
});
