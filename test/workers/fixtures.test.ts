/// <reference types="vite/client" />
import { describe, expect, it } from 'vitest';
import { encodeEnvelope, MESSAGE_TYPES, readFrame } from '../../src/protocol';

// Bundled at build time: workerd has no file system.
const fixtures = import.meta.glob<{ default: unknown }>('../../fixtures/*.json', { eager: true });

describe('message contract in workerd', () => {
  const entries = Object.entries(fixtures).map(([path, mod]) => [path.replace(/^.*\/(.+)\.json$/, '$1'), mod.default] as const);

  it('every catalog type has a fixture', () => {
    const have = new Set(entries.map(([t]) => t));
    expect(MESSAGE_TYPES.filter((t) => !have.has(t))).toEqual([]);
  });

  for (const [type, json] of entries) {
    it(`${type}: decodes as its own type and round-trips decode → encode → decode`, () => {
      const first = readFrame(JSON.stringify(json));
      expect(first.kind).toBe('message');
      if (first.kind !== 'message') return;
      expect(first.message.type).toBe(type);
      expect(readFrame(encodeEnvelope({ ...first.envelope, payload: first.message.payload }))).toEqual(first);
    });
  }
});
