/**
 * The hand-written validators of the hot operator types (src/protocol/fast-payloads.ts) against
 * the zod schemas they stand in for (src/protocol/catalog.ts), which stay the contract: on every
 * input both accept or both refuse; on acceptance the output is zod's output, key order and
 * stripped fields included; on refusal the fast validator names a field zod also objects to.
 *
 * zod is asked twice: with its compiled object parser (Node's default) and jitless, the
 * interpreted path it takes on Workers, where the fast validators are used.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CATALOG, decodePayload, decodePayloadWithZod, fieldPath, MESSAGE_TYPES, PATH_KEY_MAX, readFrame } from '../../../src/protocol';
import { FAST_PAYLOADS, HOT_TYPES, isHotType, type HotType } from '../../../src/protocol/fast-payloads';
import { fixture, frameFrom } from '../../support/fixtures';
import { arbitraryOf, defOf, jsonObject } from './support/schema-arbitraries';

/** Own keys in order, recursively: toStrictEqual does not look at order, JSON.stringify of the output does. */
function keyOrder(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(keyOrder);
  if (v === null || typeof v !== 'object') return typeof v;
  return Reflect.ownKeys(v).map((k) => [String(k), keyOrder((v as Record<PropertyKey, unknown>)[k])]);
}

function describeInput(input: unknown): string {
  try {
    return JSON.stringify(input, (_, v: unknown) => (v === undefined ? '<undefined>' : v)).slice(0, 600);
  } catch {
    return String(input);
  }
}

/** Both validators on one input; throws on any disagreement. Returns whether it was accepted. */
function agree(type: HotType, input: unknown): boolean {
  const fast = FAST_PAYLOADS[type](input);
  const schema = CATALOG[type].schema;
  for (const jitless of [true, false]) {
    const ref = schema.safeParse(input, { jitless });
    const where = `${type} (zod ${jitless ? 'jitless' : 'compiled'}) on ${describeInput(input)}`;
    expect(fast.ok, `${where}: fast ${fast.ok ? 'accepts' : `refuses (${!fast.ok && fast.field}: ${!fast.ok && fast.message})`}, zod ${ref.success ? 'accepts' : `refuses (${JSON.stringify(ref.error?.issues.map((i) => i.path))})`}`).toBe(ref.success);
    if (fast.ok && ref.success) {
      expect(fast.value, where).toStrictEqual(ref.data);
      expect(keyOrder(fast.value), where).toEqual(keyOrder(ref.data));
      expect(JSON.stringify(fast.value), where).toBe(JSON.stringify(ref.data));
    } else if (!fast.ok && !ref.success) {
      // As decodePayloadWithZod names them: a long key cut (field-path.ts).
      const paths = ref.error.issues.map((i) => fieldPath(i.path));
      expect(paths, `${where}: the fast validator's field is one zod names`).toContain(fast.field);
      expect(fast.message.length).toBeGreaterThan(0);
    }
  }
  return fast.ok;
}

describe('fast validators: which types', () => {
  it('cover exactly the hot operator→hub types, every one a catalog type sent by the operator', () => {
    expect([...HOT_TYPES].sort()).toEqual(
      [
        'node.observed',
        'device.observed',
        'deployment.observed',
        'cluster.observed',
        'node.removed',
        'device.removed',
        'deployment.removed',
        'node.event',
        'device.event',
        'deployment.event',
        'link.stats',
      ].sort(),
    );
    expect(Object.keys(FAST_PAYLOADS).sort()).toEqual([...HOT_TYPES].sort());
    for (const t of HOT_TYPES) expect(CATALOG[t].direction).toBe('op->hub');
    // Every other type still decodes through zod.
    for (const t of MESSAGE_TYPES) expect(isHotType(t)).toBe((HOT_TYPES as readonly string[]).includes(t));
  });
});

describe('fast validators accept and refuse exactly what zod does (generated payloads)', () => {
  for (const type of HOT_TYPES) {
    it(`${type}: same verdict, same output, a field zod names`, () => {
      let accepted = 0;
      let refused = 0;
      const payloads = fc.oneof({ weight: 30, arbitrary: arbitraryOf(CATALOG[type].schema) }, { weight: 1, arbitrary: fc.jsonValue() });
      fc.assert(
        fc.property(payloads, (input) => {
          if (agree(type, input)) accepted++;
          else refused++;
        }),
        // Per type, per run: a fresh seed each run, so the runs add up (CI's time is on two cores).
        { numRuns: 600 },
      );
      // A generator that only made garbage (or only clean frames) would prove nothing.
      expect(accepted, `${type}: accepted`).toBeGreaterThan(60);
      expect(refused, `${type}: refused`).toBeGreaterThan(60);
    });
  }
});

// ---------------------------------------------------------------------------------------------
// Every field of every fixture, each replaced in turn by every boundary value: not left to chance.
// ---------------------------------------------------------------------------------------------

const ASTRAL = '😀';
const text = (n: number, c = 'a') => c.repeat(n);
/** The boundary values tried in every slot. */
const SLOT_VALUES: readonly unknown[] = [
  undefined,
  null,
  true,
  false,
  0,
  -0,
  1,
  -1,
  1.5,
  0.1,
  2 ** 53 - 1,
  2 ** 53,
  -(2 ** 53 - 1),
  1e21,
  Infinity,
  -Infinity,
  '',
  'x',
  ' x',
  'x\n',
  'A1._:-z',
  '0',
  'é',
  ASTRAL,
  '\ud800',
  '2026-08-19T14:02:11.482Z',
  '2026-08-19T14:02:11.482+05:30',
  '2026-08-19 14:02:11Z',
  '01J9X2E5G7QK8V3B0YHN4TZC6M',
  '01J9X2E5G7QK8V3B0YHN4TZC6U',
  'healthy',
  'ready',
  'warning',
  'NoSchedule',
  ...[63, 64, 65, 127, 128, 129, 252, 253, 254, 255, 256, 257, 316, 317, 318, 2047, 2048, 2049].map((n) => text(n)),
  ...[128, 129, 256, 257, 2048, 2049].map((n) => text(n, ASTRAL)),
  text(256) + '\ud800',
  [],
  ['x'],
  ['x', 'x'],
  Array.from({ length: 64 }, (_, i) => `r${i}`),
  Array.from({ length: 65 }, () => ({ key: 'k', effect: 'NoSchedule' })),
  Array.from({ length: 4096 }, (_, i) => `r${i}`),
  Array.from({ length: 4097 }, (_, i) => `r${i}`),
  {},
  { a: 'b' },
  jsonObject([['__proto__', 'x']]),
  jsonObject(Array.from({ length: 128 }, (_, i) => [`k${i}`, 'v'])),
  jsonObject(Array.from({ length: 129 }, (_, i) => [`k${i}`, 'v'])),
  jsonObject([...Array.from({ length: 128 }, (_, i): [string, unknown] => [`k${i}`, 'v']), ['__proto__', 'v']]),
  jsonObject([[text(318), 'v']]),
  jsonObject([[text(317, ASTRAL), 'v']]),
  jsonObject([['2', 'b'], ['1', 'a'], ['z', 'c']]),
];

type Path = (string | number)[];

/** Every slot of a JSON value (object keys and array indexes), depth first. */
function slots(v: unknown, at: Path = []): Path[] {
  if (v === null || typeof v !== 'object') return [];
  const keys: (string | number)[] = Array.isArray(v) ? v.map((_, i) => i) : Object.keys(v);
  return keys.flatMap((k) => [[...at, k], ...slots((v as Record<string | number, unknown>)[k], [...at, k])]);
}

/** A copy of `root` with the slot at `path` changed: given `value`, removed, or with a key added beside it. */
function edit(root: unknown, path: Path, change: { set: unknown } | { remove: true } | { sibling: [string, unknown] }): unknown {
  const clone = (v: unknown): unknown =>
    Array.isArray(v) ? v.map(clone) : v !== null && typeof v === 'object' ? jsonObject(Object.entries(v).map(([k, x]) => [k, clone(x)])) : v;
  const out = clone(root);
  let parent = out as Record<string | number, unknown>;
  for (const k of path.slice(0, -1)) parent = parent[k] as Record<string | number, unknown>;
  const last = path[path.length - 1]!;
  if ('set' in change) parent[last] = change.set;
  else if ('remove' in change) {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last];
  } else Object.defineProperty(parent, change.sibling[0], { value: change.sibling[1], enumerable: true, writable: true, configurable: true });
  return out;
}

describe('fast validators against zod, every fixture slot at every boundary', () => {
  for (const type of HOT_TYPES) {
    it(`${type}`, () => {
      const base = fixture(type).envelope.payload;
      let cases = 0;
      expect(agree(type, base)).toBe(true);
      for (const top of [null, [], 'x', 1, true, {}, jsonObject([['__proto__', base]])]) {
        agree(type, top);
        cases++;
      }
      for (const path of slots(base)) {
        agree(type, edit(base, path, { remove: true }));
        for (const sibling of [
          ['extra', 1],
          ['__proto__', { ...(base as object) }],
          ['constructor', 'x'],
        ] as [string, unknown][]) {
          agree(type, edit(base, path, { sibling }));
        }
        for (const value of SLOT_VALUES) agree(type, edit(base, path, { set: value }));
        cases += 4 + SLOT_VALUES.length;
      }
      // Optional fields absent from the fixture get the same treatment.
      const shape = defOf(CATALOG[type].schema).shape ?? {};
      for (const key of Object.keys(shape).filter((k) => !(k in (base as object)))) {
        for (const value of SLOT_VALUES) agree(type, edit(base, [key], { set: value }));
        cases += SLOT_VALUES.length;
      }
      expect(cases).toBeGreaterThan(50);
    });
  }
});

describe('decodePayload and readFrame use the fast path and keep their answers', () => {
  it('decodePayload answers as zod does, with a reason that names the type and the field', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...HOT_TYPES).chain((type) => fc.tuple(fc.constant(type), arbitraryOf(CATALOG[type].schema))),
        ([type, input]) => {
          const fast = decodePayload(type, input);
          const ref = decodePayloadWithZod(type, input);
          expect(fast.ok).toBe(ref.ok);
          if (fast.ok && ref.ok) expect(fast.message).toStrictEqual(ref.message);
          if (!fast.ok && !ref.ok) {
            expect(fast.unknownType).toBe(false);
            const r = FAST_PAYLOADS[type](input);
            expect(r.ok).toBe(false);
            if (!r.ok) expect(fast.reason).toBe(`${type} ${r.field}: ${r.message}`);
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('a poison hot frame is still a poison frame, its reason naming the field', () => {
    const cases: [HotType, Record<string, unknown>, RegExp][] = [
      ['device.observed', { memory_total_mb: 1.5 }, /^device\.observed memory_total_mb: /],
      // The key is the sender's text: named by its first PATH_KEY_MAX characters, never whole.
      ['node.observed', { labels: { ['k'.repeat(318)]: 'v' } }, new RegExp(`^node\\.observed labels\\.k{${PATH_KEY_MAX}}…: `)],
      ['deployment.observed', { ready_replicas: 3 }, /^deployment\.observed ready_replicas: /],
      ['deployment.observed', { replica_ids: ['a', 'a'], ready_replicas: 0 }, /^deployment\.observed replica_ids: /],
      ['node.event', { occurred_at: 'yesterday' }, /^node\.event occurred_at: /],
      ['link.stats', { handler_failures: -1 }, /^link\.stats handler_failures: /],
      ['link.stats', { dropped_progress: 1.5 }, /^link\.stats dropped_progress: /],
    ];
    for (const [type, change, reason] of cases) {
      const f = readFrame(frameFrom(fixture(type), { seq: 5, payload: { ...fixture(type).envelope.payload, ...change } }));
      expect(f.kind, type).toBe('poison');
      if (f.kind === 'poison') expect(f.reason).toMatch(reason);
    }
  });
});
