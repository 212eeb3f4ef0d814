/**
 * Inputs for proving a hand-written validator equal to a zod schema, generated from the schema
 * itself: its fields, length bounds, patterns, enums, optional and nullable slots are read off
 * the schema's definition, so when a schema changes the generated inputs move with it, and a
 * validator that did not follow disagrees with zod on them.
 *
 * Every value is mostly valid, with a defect here and there, because one defect in an otherwise
 * good frame is where two validators differ: lengths at and past the bound (counted in UTF-16
 * units and in code points), counts at 0 and 2^53 - 1 and past them, non-integers, wrong types,
 * null where undefined is allowed and the reverse, missing and extra fields, `__proto__` and
 * other awkward keys, non-ASCII, astral and lone-surrogate text. Objects are built the way
 * `JSON.parse` builds them (own data properties, `__proto__` included as an own key).
 */
import fc from 'fast-check';
import { RFC3339_RE } from '../../../../src/protocol';

/** The part of a zod 4 schema's definition read here (zod's own `_zod.def`). */
interface Node {
  _zod: { def: Def };
}
interface Def {
  type: string;
  checks?: Node[];
  shape?: Record<string, Node>;
  element?: Node;
  keyType?: Node;
  valueType?: Node;
  innerType?: Node;
  entries?: Record<string, string | number>;
  // check definitions
  check?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  value?: number;
  inclusive?: boolean;
  pattern?: RegExp;
}

export function defOf(schema: unknown): Def {
  return (schema as Node)._zod.def;
}

interface Bounds {
  minLength: number;
  maxLength: number | null;
  pattern: RegExp | null;
  int: boolean;
  low: number | null;
  lowExclusive: boolean;
  high: number | null;
  highExclusive: boolean;
}

function boundsOf(def: Def): Bounds {
  const b: Bounds = { minLength: 0, maxLength: null, pattern: null, int: false, low: null, lowExclusive: false, high: null, highExclusive: false };
  for (const c of def.checks ?? []) {
    const d = c._zod.def;
    if (d.check === 'min_length') b.minLength = d.minimum ?? 0;
    else if (d.check === 'max_length') b.maxLength = d.maximum ?? null;
    else if (d.check === 'string_format' && d.pattern) b.pattern = d.pattern;
    else if (d.check === 'number_format') b.int = d.format?.includes('int') ?? false;
    else if (d.check === 'greater_than') {
      b.low = d.value ?? 0;
      b.lowExclusive = !d.inclusive;
    } else if (d.check === 'less_than') {
      b.high = d.value ?? null;
      b.highExclusive = !d.inclusive;
    }
  }
  // The least and greatest integers inside the bounds.
  if (b.int && b.low !== null) b.low = b.lowExclusive ? Math.floor(b.low) + 1 : Math.ceil(b.low);
  if (b.int && b.high !== null) b.high = b.highExclusive ? Math.ceil(b.high) - 1 : Math.floor(b.high);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Building blocks.
// ---------------------------------------------------------------------------------------------

/** Characters of every kind a JSON string can carry. */
const anyChar = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'Z', '0', '9', '.', '-', '_', ':', ' ', '/', '=') },
  { weight: 2, arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\u0000', '\u001f', '\u007f', '<') },
  { weight: 2, arbitrary: fc.constantFrom('é', 'ß', '中', '\u2028', '\ufeff', '\u0301') },
  { weight: 2, arbitrary: fc.constantFrom('😀', '𝔘', '\u{10ffff}') },
  { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udbff', '\udc00', '\udfff') },
);
const astral = fc.constantFrom('😀', '𝔘', '\u{10ffff}');

function textOf(chars: fc.Arbitrary<string>, n: number): fc.Arbitrary<string> {
  return fc.array(chars, { minLength: n, maxLength: n }).map((a) => a.join(''));
}

/** Values of the wrong kind for any slot. */
const wrongType: fc.Arbitrary<unknown> = fc.constantFrom<unknown>(
  null,
  undefined,
  true,
  false,
  0,
  1,
  -1,
  1.5,
  '',
  'x',
  '1',
  'true',
  'null',
  [],
  ['x'],
  {},
  { a: 1 },
);

/** A JSON-shaped object with these own properties in this order (as JSON.parse makes it: `__proto__` is an own key). */
export function jsonObject(entries: readonly (readonly [string, unknown])[]): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  return o;
}

const extraKeys = fc.constantFrom('extra', 'utilization', '__proto__', 'constructor', 'toString', 'hasOwnProperty', '0', '7', '', 'ID ');
const anyJson: fc.Arbitrary<unknown> = fc.oneof(wrongType, fc.jsonValue({ maxDepth: 2 }));

function withDefect<T>(valid: fc.Arbitrary<T>, defects: fc.Arbitrary<unknown>, defectWeight: number): fc.Arbitrary<unknown> {
  if (defectWeight <= 0) return valid;
  return fc.oneof({ weight: 100 - defectWeight, arbitrary: valid }, { weight: defectWeight, arbitrary: defects });
}

// ---------------------------------------------------------------------------------------------
// Per kind of schema.
// ---------------------------------------------------------------------------------------------

/** A string the pattern accepts, `n` UTF-16 units long where the pattern allows repeating its last character. */
function patterned(pattern: RegExp, n: number | null): fc.Arbitrary<string> {
  return fc.stringMatching(pattern).map((s) => {
    if (n === null || s.length === 0) return s;
    return s.length >= n ? s.slice(0, n) : s + s[s.length - 1]!.repeat(n - s.length);
  });
}

function stringArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const b = boundsOf(def);
  const max = b.maxLength;
  if (b.pattern) {
    const p = b.pattern;
    const lengths = [b.minLength, b.minLength + 1, ...(max !== null ? [max - 1, max, max + 1] : [])].filter((n) => n >= 0);
    const valid = fc.oneof(
      { weight: 4, arbitrary: patterned(p, null) },
      { weight: 1, arbitrary: fc.constantFrom(...lengths).chain((n) => patterned(p, n)) },
      // A timestamp's schema also refuses what names no time (hour 25): most strings the pattern
      // makes do not, so real times are mixed in for the schema to accept.
      ...(p.source === RFC3339_RE.source ? [{ weight: 10, arbitrary: fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => new Date(ms).toISOString()) }] : []),
    );
    const defects = fc.oneof(
      wrongType,
      fc.constant(''),
      // One character swapped for any other: inside or outside the pattern.
      fc.tuple(patterned(p, null), anyChar, fc.nat()).map(([s, c, i]) => (s.length ? s.slice(0, i % s.length) + c + s.slice((i % s.length) + 1) : c)),
      patterned(p, null).map((s) => ` ${s}`),
      patterned(p, null).map((s) => `${s}\n`),
    );
    return withDefect(valid, defects, w);
  }
  const around = max === null ? [b.minLength, b.minLength + 1, 64] : [b.minLength, b.minLength + 1, max - 1, max, max + 1];
  const valid = fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: anyChar, minLength: b.minLength, maxLength: Math.min(max ?? 24, 24) }) },
    { weight: 1, arbitrary: fc.constantFrom(...around.filter((n) => n >= 0)).chain((n) => textOf(fc.constant('a'), n)) },
  );
  const defects = fc.oneof(
    wrongType,
    // At and past the bound, in units and in code points (an astral character is one code point, two units).
    fc.constantFrom(...around.filter((n) => n >= 0)).chain((n) => textOf(anyChar, n)),
    ...(max !== null ? [fc.constantFrom(max - 1, max, max + 1).chain((n) => textOf(astral, n))] : []),
    ...(max !== null ? [fc.constantFrom(max, max + 1).chain((n) => textOf(fc.constantFrom('a', '😀'), n))] : []),
    ...(b.minLength > 0 ? [fc.constant('')] : []),
  );
  return withDefect(valid, defects, w * 2);
}

function numberArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const b = boundsOf(def);
  const low = b.low ?? -1e6;
  const high = b.high ?? 1e6;
  const edges = [low, low + 1, high - 1, high].filter((n) => Number.isFinite(n));
  const valid = fc.oneof(
    { weight: 2, arbitrary: b.int ? fc.integer({ min: Math.max(low, -1e6), max: Math.min(high, 1e6) }) : fc.double({ min: low, max: high, noNaN: true }) },
    // Small counts, where a refinement comparing them with a length bites.
    { weight: 4, arbitrary: fc.integer({ min: Math.max(Math.ceil(low), 0), max: Math.max(Math.ceil(low), 0) + 3 }) },
    { weight: 1, arbitrary: fc.constantFrom(...edges) },
  );
  const defects = fc.oneof(
    wrongType,
    fc.constantFrom(
      -0,
      low - 1,
      high + 1,
      high + 2,
      2 ** 53,
      2 ** 53 + 2,
      -(2 ** 53),
      0.5,
      -0.5,
      1e-7,
      5e-324,
      1e21,
      1e300,
      -1e300,
      Infinity,
      -Infinity,
    ),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
  );
  return withDefect(valid, defects, w * 2);
}

function enumArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const values = Object.values(def.entries ?? {});
  const defects = fc.oneof(
    wrongType,
    fc.constantFrom(...values).map((v) => (typeof v === 'string' ? v.toUpperCase() : v)),
    fc.constantFrom(...values).map((v) => `${v} `),
  );
  return withDefect(fc.constantFrom(...values), defects, w);
}

function arrayArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const b = boundsOf(def);
  const element = def.element!;
  // Elements and entries come several to a value: fewer defects each keeps most values whole.
  const one = arbitraryOf(element, w >> 1);
  const max = b.maxLength;
  const sizes = max === null ? [] : [max, max + 1];
  const valid = fc.oneof(
    { weight: 6, arbitrary: fc.array(one, { maxLength: 4 }) },
    // Repeats (a refinement may forbid them).
    { weight: 2, arbitrary: fc.array(one, { minLength: 1, maxLength: 3 }).chain((pool) => fc.array(fc.constantFrom(...pool), { maxLength: 5 })) },
    // At and past the bound, all valid and distinct where that can be arranged.
    ...(sizes.length ? [{ weight: 1, arbitrary: fc.constantFrom(...sizes).chain((n) => distinct(element, n)) }] : []),
  );
  return withDefect(valid, wrongType, w);
}

/** `n` values for `element`, valid and distinct for a string element. */
function distinct(element: Node, n: number): fc.Arbitrary<unknown[]> {
  const def = defOf(element);
  if (def.type === 'string') return fc.constant(Array.from({ length: n }, (_, i) => `r${i}`));
  return arbitraryOf(element, 0).map((v) => Array.from({ length: n }, () => v));
}

function recordArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const kb = boundsOf(defOf(def.keyType));
  const key = fc.oneof(
    { weight: 30, arbitrary: fc.string({ unit: anyChar, minLength: 1, maxLength: 12 }) },
    { weight: 3, arbitrary: fc.constantFrom('__proto__', 'constructor', 'toString', '0', '1', '42', '-1', '1e3', 'a.b/c', '😀') },
    { weight: 1, arbitrary: fc.constantFrom(kb.minLength - 1, ...(kb.maxLength !== null ? [kb.maxLength, kb.maxLength + 1] : [])).filter((n) => n >= 0).chain((n) => textOf(anyChar, n)) },
    ...(kb.maxLength !== null ? [{ weight: 1, arbitrary: fc.constantFrom(kb.maxLength, kb.maxLength + 1).chain((n) => textOf(astral, n)) }] : []),
  );
  const value = arbitraryOf(def.valueType!, w >> 1);
  const few = fc.array(fc.tuple(key, value), { maxLength: 5 });
  // Counts at and past a count bound (a refinement the definition does not show): a run of plain
  // entries, sometimes with a `__proto__` among them (zod skips it, so it is not counted).
  const many = fc
    .tuple(fc.constantFrom(127, 128, 129, 130), fc.boolean(), arbitraryOf(def.valueType!, 0))
    .map(([n, proto, v]) => {
      const entries: [string, unknown][] = Array.from({ length: n }, (_, i) => [`k${i}`, v]);
      if (proto) entries.splice(n >> 1, 0, ['__proto__', v]);
      return entries;
    });
  const valid = fc.oneof({ weight: 12, arbitrary: few }, { weight: 1, arbitrary: many }).map(jsonObject);
  return withDefect(valid, fc.oneof(wrongType, fc.constant(['a', 'b'])), w);
}

function objectArb(def: Def, w: number): fc.Arbitrary<unknown> {
  const shape = def.shape ?? {};
  const fields = Object.entries(shape).map(([k, s]) => {
    const opt = defOf(s).type === 'optional';
    // A slot is given a value, left out, or given undefined or null.
    const options = [
      { weight: 100, arbitrary: arbitraryOf(s, w).map((v) => ({ k, v, present: true })) },
      { weight: opt ? 30 : w >> 2, arbitrary: fc.constant({ k, v: undefined as unknown, present: false }) },
      { weight: w >> 2, arbitrary: fc.constantFrom<unknown>(undefined, null).map((v) => ({ k, v, present: true })) },
    ];
    return fc.oneof(...options.filter((o) => o.weight > 0));
  });
  const extras = fc.array(fc.tuple(extraKeys, fc.oneof(anyJson, fc.constantFrom(...Object.keys(shape)).map((k) => ({ [k]: 'shadow' })))), { maxLength: 2 });
  const valid = fc.tuple(fc.tuple(...fields), extras, fc.nat()).map(([slots, extra, at]) => {
    const entries: [string, unknown][] = slots.filter((s) => s.present).map((s) => [s.k, s.v]);
    for (const e of extra) entries.splice(at % (entries.length + 1), 0, e);
    // Duplicate keys cannot survive JSON.parse: the last one wins.
    const seen = new Map<string, unknown>();
    for (const [k, v] of entries) {
      seen.delete(k);
      seen.set(k, v);
    }
    return jsonObject([...seen]);
  });
  return withDefect(valid, wrongType, w);
}

/**
 * Values for `schema`: valid most of the time at every level, with a defect at a level `w`
 * percent of the time (0: as valid as the definition alone can make them).
 */
export function arbitraryOf(schema: unknown, w = 6): fc.Arbitrary<unknown> {
  const def = defOf(schema);
  switch (def.type) {
    case 'string':
      return stringArb(def, w);
    case 'number':
      return numberArb(def, w);
    case 'boolean':
      return withDefect(fc.boolean(), wrongType, w);
    case 'enum':
      return enumArb(def, w);
    case 'array':
      return arrayArb(def, w);
    case 'record':
      return recordArb(def, w);
    case 'object':
      return objectArb(def, w);
    case 'optional':
      return arbitraryOf(def.innerType!, w);
    case 'nullable':
      return fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 3, arbitrary: arbitraryOf(def.innerType!, w) });
    case 'unknown':
      return anyJson;
    default:
      throw new Error(`no generator for zod type ${def.type}: teach schema-arbitraries.ts about it`);
  }
}
