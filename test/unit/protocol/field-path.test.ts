/**
 * A refusal names a field by a path whose object keys are the sender's text: a key is quoted up to
 * PATH_KEY_MAX code points, then cut and marked, between code points, and both validators (zod and
 * the hand-written hot-path ones) give the same reason for the same frame.
 */
import { describe, expect, it } from 'vitest';
import { decodePayload, decodePayloadWithZod, fieldPath, PATH_KEY_MAX, pathSegment } from '../../../src/protocol';
import { fixture } from '../../support/fixtures';

describe('field paths quote at most PATH_KEY_MAX characters of a key', () => {
  it('keeps a short key and an index whole, cuts a long key and marks the cut', () => {
    expect(pathSegment('k'.repeat(PATH_KEY_MAX))).toBe('k'.repeat(PATH_KEY_MAX));
    expect(pathSegment('k'.repeat(PATH_KEY_MAX + 1))).toBe(`${'k'.repeat(PATH_KEY_MAX)}…`);
    expect(pathSegment(3)).toBe('3');
    expect(fieldPath(['labels', 'x'.repeat(500_000)])).toBe(`labels.${'x'.repeat(PATH_KEY_MAX)}…`);
    expect(fieldPath([])).toBe('payload');
  });

  it('counts and cuts in code points: an emoji is one character and never split', () => {
    const emoji = '\u{1F600}';
    expect(pathSegment(emoji.repeat(PATH_KEY_MAX))).toBe(emoji.repeat(PATH_KEY_MAX));
    expect(pathSegment(emoji.repeat(PATH_KEY_MAX + 1))).toBe(`${emoji.repeat(PATH_KEY_MAX)}…`);
    expect(pathSegment(`a${emoji.repeat(PATH_KEY_MAX)}`)).toBe(`a${emoji.repeat(PATH_KEY_MAX - 1)}…`);
  });

  it('zod and the fast validator give the same cut reason for a half-MiB label key', () => {
    const payload = { ...fixture('node.observed').envelope.payload, labels: { ['k'.repeat(500_000)]: 'v' } };
    const fast = decodePayload('node.observed', payload);
    const zod = decodePayloadWithZod('node.observed', payload);
    expect(fast.ok || zod.ok).toBe(false);
    if (fast.ok || zod.ok) return;
    expect(fast.reason).toMatch(new RegExp(`^node\\.observed labels\\.k{${PATH_KEY_MAX}}…: `));
    expect(fast.reason.length).toBeLessThan(200);
    expect(zod.reason.split(':')[0]).toBe(fast.reason.split(':')[0]);
  });

  it('zod and the fast validator cut a long emoji key the same way (a value over its limit)', () => {
    const key = '\u{1F600}'.repeat(100);
    const payload = { ...fixture('node.observed').envelope.payload, labels: { [key]: 'v'.repeat(10_000) } };
    const fast = decodePayload('node.observed', payload);
    const zod = decodePayloadWithZod('node.observed', payload);
    if (fast.ok || zod.ok) throw new Error('both must refuse');
    const field = `node.observed labels.${'\u{1F600}'.repeat(PATH_KEY_MAX)}…`;
    expect(fast.reason.startsWith(`${field}: `)).toBe(true);
    expect(zod.reason.startsWith(`${field}: `)).toBe(true);
  });
});
