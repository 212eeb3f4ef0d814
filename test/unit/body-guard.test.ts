import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LONE_SURROGATE, MAX_BODY_DEPTH, unsafeValue } from '../../src/hub/admin/body-guard';

/**
 * The guard's definition, written the obvious way (a fresh path per step, every key's path built):
 * the first unsafe key or string, depth first, keys in the object's order. The guard walks one
 * shared path and builds a path only for the problem it reports; it must report exactly this.
 */
function reference(v: unknown, path: string[]): { path: string; message: string } | null {
  if (path.length > MAX_BODY_DEPTH && v !== null && typeof v === 'object') return { path: path.join('.'), message: `nested more than ${MAX_BODY_DEPTH} levels deep` };
  const stringProblem = (s: string) =>
    s.includes('\u0000') ? 'contains a NUL character, which cannot be stored' : LONE_SURROGATE.test(s) ? 'is not valid Unicode (a lone surrogate)' : null;
  if (typeof v === 'string') {
    const m = stringProblem(v);
    return m ? { path: path.join('.'), message: m } : null;
  }
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const p = reference(v[i], [...path, String(i)]);
      if (p) return p;
    }
    return null;
  }
  if (v !== null && typeof v === 'object') {
    for (const key of Object.keys(v)) {
      const at = [...path, key].join('.');
      if (key === '__proto__') return { path: at, message: '__proto__ is not allowed as a key' };
      const km = stringProblem(key);
      if (km) return { path: at, message: `the key ${km}` };
      const p = reference((v as Record<string, unknown>)[key], [...path, key]);
      if (p) return p;
    }
  }
  return null;
}

// Bodies as a client sends them: JSON text, parsed (so `__proto__` arrives as an own key, as it
// does through the guard's JSON.parse), with the strings and keys the guard refuses mixed in.
const text = fc.oneof({ weight: 6, arbitrary: fc.string({ maxLength: 5 }) }, fc.constantFrom('\u0000', 'a\u0000b', 'x\uD800', '\uDC00', '\uD83D\uDE00', 'é'));
const key = fc.oneof({ weight: 6, arbitrary: fc.string({ maxLength: 4 }) }, fc.constantFrom('__proto__', 'k\u0000', '\uDBFF', 'deployments', '0'));
const { json } = fc.letrec<{ json: string }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    text.map((s) => JSON.stringify(s)),
    fc.oneof(fc.integer(), fc.boolean(), fc.constant(null)).map((x) => JSON.stringify(x)),
    fc.array(tie('json'), { maxLength: 4 }).map((xs) => `[${xs.join(',')}]`),
    fc.array(fc.tuple(key, tie('json')), { maxLength: 4 }).map((kv) => `{${kv.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
  ),
}));
// Nesting near the limit, around a body from above.
const deep = fc.tuple(fc.integer({ min: MAX_BODY_DEPTH - 3, max: MAX_BODY_DEPTH + 3 }), fc.boolean(), json).map(([n, arrays, inner]) =>
  arrays ? `${'['.repeat(n)}${inner}${']'.repeat(n)}` : `${'{"a":'.repeat(n)}${inner}${'}'.repeat(n)}`,
);

describe('admin body guard: unsafeValue', () => {
  it('reports exactly what the obvious walk reports, over generated bodies', () => {
    fc.assert(
      fc.property(fc.oneof(json, deep), (body) => {
        const v: unknown = JSON.parse(body);
        const path: string[] = [];
        expect(unsafeValue(v, path)).toEqual(reference(v, []));
        // The shared path is the caller's: what it passed is what it gets back when all is well.
        if (unsafeValue(v) === null) expect(path).toEqual([]);
      }),
      { numRuns: 3_000 },
    );
  });

  it('names the field at fault in a bulk body, past thousands of clean keys', () => {
    const deployments = Array.from({ length: 2_000 }, (_, i) => ({ deployment_id: `d${i}`, workload_id: 'w', min_replicas: 1, max_replicas: 2, serving: { env: { A: 'b' }, args: ['x', 1] } }));
    const body = JSON.parse(JSON.stringify({ deployments }));
    expect(unsafeValue(body)).toBeNull();
    body.deployments[1_999].serving.env['B\u0000'] = 'c';
    expect(unsafeValue(body)).toEqual({ path: 'deployments.1999.serving.env.B\u0000', message: 'the key contains a NUL character, which cannot be stored' });
    body.deployments[7].serving.args[1] = '\uD800';
    expect(unsafeValue(body)).toEqual({ path: 'deployments.7.serving.args.1', message: 'is not valid Unicode (a lone surrogate)' });
    expect(unsafeValue(JSON.parse('{"deployments":[{"__proto__":{}}]}'))).toEqual({ path: 'deployments.0.__proto__', message: '__proto__ is not allowed as a key' });
  });
});
