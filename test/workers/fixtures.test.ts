/// <reference types="vite/client" />
import { describe, expect, it } from 'vitest';
import { canonicalPing, canonicalPong, encodeEnvelope, MESSAGE_TYPES, readFrame } from '../../src/protocol';

// Bundled at build time: workerd has no file system.
const fixtures = import.meta.glob<{ default: unknown }>('../../fixtures/*.json', { eager: true });
const forms = import.meta.glob<{ default: unknown }>('../../fixtures/forms/*.json', { eager: true });

describe('message contract in workerd', () => {
  const entries = Object.entries(fixtures).map(([path, mod]) => [path.replace(/^.*\/(.+)\.json$/, '$1'), mod.default] as const);
  const formEntries = Object.entries(forms).map(([path, mod]) => [path.replace(/^.*\/(.+)\.json$/, '$1'), mod.default] as const);

  it('every catalog type has a fixture', () => {
    const have = new Set(entries.map(([t]) => t));
    expect(MESSAGE_TYPES.filter((t) => !have.has(t))).toEqual([]);
  });

  it('the alternative forms are there, each named after its own type', () => {
    expect(formEntries.length).toBeGreaterThan(0);
    for (const [name, json] of formEntries) {
      const type = (json as { type: string }).type;
      expect(MESSAGE_TYPES as string[]).toContain(type);
      expect(name.startsWith(`${type}.`), `${name} starts with ${type}.`).toBe(true);
    }
  });

  it('ping and pong are the canonical texts', () => {
    for (const [type, json] of entries) {
      if (type === 'ping') expect(JSON.stringify(json)).toBe(canonicalPing((json as { ack: number }).ack));
      if (type === 'pong') expect(JSON.stringify(json)).toBe(canonicalPong((json as { ack: number }).ack));
    }
  });

  for (const [name, json] of [...entries, ...formEntries.map(([n, j]) => [`forms/${n}`, j] as const)]) {
    it(`${name}: decodes as its own type and round-trips decode → encode → decode`, () => {
      const type = (json as { type: string }).type;
      if (!name.startsWith('forms/')) expect(type).toBe(name);
      const first = readFrame(JSON.stringify(json));
      expect(first.kind).toBe('message');
      if (first.kind !== 'message') return;
      expect(first.message.type).toBe(type);
      const encoded = encodeEnvelope({ ...first.envelope, payload: first.message.payload });
      expect(readFrame(encoded)).toEqual(first);
      expect(JSON.parse(encoded)).toEqual(json);
    });
  }
});
