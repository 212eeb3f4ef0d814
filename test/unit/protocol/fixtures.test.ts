import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalPing, canonicalPong, encodeEnvelope, MESSAGE_TYPES, readFrame } from '../../../src/protocol';

const root = join(import.meta.dirname, '../../..');
const fixtureDir = join(root, 'fixtures');
const formsDir = join(fixtureDir, 'forms');
const fixtureFiles = readdirSync(fixtureDir).filter((f) => f.endsWith('.json'));
const formFiles = readdirSync(formsDir).filter((f) => f.endsWith('.json'));
const messagesMd = readFileSync(join(root, 'MESSAGES.md'), 'utf8');

/** Every file of the corpus: the canonical example of each type, then the alternative forms. */
const corpus = [
  ...fixtureFiles.map((f) => ({ name: f.replace(/\.json$/, ''), path: join(fixtureDir, f), form: false })),
  ...formFiles.map((f) => ({ name: `forms/${f.replace(/\.json$/, '')}`, path: join(formsDir, f), form: true })),
];

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

  it('every alternative form is named <type>.<form>.json after a catalog type, and MESSAGES.md names its file', () => {
    expect(formFiles.length).toBeGreaterThan(0);
    for (const f of formFiles) {
      const type = (JSON.parse(readFileSync(join(formsDir, f), 'utf8')) as { type: string }).type;
      expect(MESSAGE_TYPES as string[], f).toContain(type);
      expect(f.startsWith(`${type}.`), `${f} starts with its type ${type}`).toBe(true);
      expect(f.length, `${f} names a form after its type`).toBeGreaterThan(`${type}.json`.length);
      expect(messagesMd, `MESSAGES.md mentions fixtures/forms/${f}`).toContain(`fixtures/forms/${f}`);
    }
  });

  it('ping and pong fixtures are the canonical texts, byte for byte once the indentation is removed', () => {
    for (const [type, canonical] of [['ping', canonicalPing], ['pong', canonicalPong]] as const) {
      const json = JSON.parse(readFileSync(join(fixtureDir, `${type}.json`), 'utf8')) as { ack: number };
      expect(JSON.stringify(json)).toBe(canonical(json.ack));
    }
  });

  for (const file of corpus) {
    it(`${file.name}: the fixture decodes as its own type and round-trips decode → encode → decode`, () => {
      const text = readFileSync(file.path, 'utf8');
      const json = JSON.parse(text) as { type: string; payload: unknown };
      const type = file.form ? json.type : file.name;
      const first = readFrame(text);
      expect(first.kind).toBe('message');
      if (first.kind !== 'message') return;
      expect(first.envelope.type).toBe(type);
      expect(first.message.type).toBe(type);
      const encoded = encodeEnvelope({ ...first.envelope, payload: first.message.payload });
      expect(readFrame(encoded)).toEqual(first);
      // The envelope survives exactly, nulls included: what the file says is what goes on the wire.
      expect(JSON.parse(encoded)).toEqual(JSON.parse(text));
      // Nothing the fixture states is lost in decoding: the canonical example is exactly the contract.
      expect(first.message.payload).toEqual(json.payload);
    });
  }
});
