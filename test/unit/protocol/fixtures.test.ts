import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { encodeEnvelope, MESSAGE_TYPES, readFrame } from '../../../src/protocol';

const root = join(import.meta.dirname, '../../..');
const fixtureDir = join(root, 'fixtures');
const fixtureFiles = readdirSync(fixtureDir).filter((f) => f.endsWith('.json'));
const messagesMd = readFileSync(join(root, 'MESSAGES.md'), 'utf8');

describe('message contract: fixtures and MESSAGES.md', () => {
  it('every catalog type has a fixture named after it', () => {
    const have = new Set(fixtureFiles.map((f) => f.replace(/\.json$/, '')));
    expect(MESSAGE_TYPES.filter((t) => !have.has(t))).toEqual([]);
  });

  it('every fixture is a type in the catalog (a type with no fixture is not part of the contract, and vice versa)', () => {
    const known = new Set<string>(MESSAGE_TYPES);
    expect(fixtureFiles.map((f) => f.replace(/\.json$/, '')).filter((t) => !known.has(t))).toEqual([]);
  });

  it('every catalog type has its own section in MESSAGES.md', () => {
    const missing = MESSAGE_TYPES.filter((t) => !messagesMd.includes(`\n### \`${t}\`\n`));
    expect(missing).toEqual([]);
  });

  for (const file of fixtureFiles) {
    const type = file.replace(/\.json$/, '');
    it(`${type}: the fixture decodes as its own type and round-trips decode → encode → decode`, () => {
      const text = readFileSync(join(fixtureDir, file), 'utf8');
      const first = readFrame(text);
      expect(first.kind).toBe('message');
      if (first.kind !== 'message') return;
      expect(first.envelope.type).toBe(type);
      expect(first.message.type).toBe(type);
      const again = readFrame(encodeEnvelope({ ...first.envelope, payload: first.message.payload }));
      expect(again).toEqual(first);
      // Nothing the fixture states is lost in decoding: the canonical example is exactly the contract.
      expect(first.message.payload).toEqual(JSON.parse(text).payload);
    });
  }
});
