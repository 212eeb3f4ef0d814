/**
 * Regions: the configuration rules and the residency decision, as pure logic. The namespaces here
 * are stand-ins for the two runtimes the hub meets: Cloudflare (jurisdiction() works, ids carry
 * their jurisdiction) and local workerd (jurisdiction() throws, as checked with workerd
 * 1.20260426). The hub in workerd is exercised by test/workers-eu.
 */
import { describe, expect, it } from 'vitest';
import { newRouteKey, placementGenerationOf, routeKeyOf } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { hintOutsideJurisdiction, hintsWithin, jurisdictionOf, LOCATION_HINTS, placementHint, regionalNamespace, residencyProblem } from '../../src/hub/region';
import { newId } from '../../src/protocol';

const cfg = (vars: Record<string, string>) => hubConfig({ ...vars });

function id(name: string, jurisdiction?: string): DurableObjectId {
  return { name, jurisdiction, toString: () => `${jurisdiction ?? ''}:${name}`, equals: () => false } as DurableObjectId;
}

/** A namespace as Cloudflare's: jurisdiction() gives a sub-namespace whose ids carry it. */
function cloudflareNamespace(): DurableObjectNamespace {
  const make = (j?: string): DurableObjectNamespace =>
    ({
      idFromName: (name: string) => id(name, j),
      get: (i: DurableObjectId) => ({ id: i }),
      jurisdiction: (sub: string) => make(sub),
    }) as unknown as DurableObjectNamespace;
  return make();
}

/** A namespace as local workerd's: no jurisdictions at all. */
function workerdNamespace(): DurableObjectNamespace {
  return {
    idFromName: (name: string) => id(name),
    get: (i: DurableObjectId) => ({ id: i }),
    jurisdiction: () => {
      throw new Error('Jurisdiction restrictions are not implemented in workerd.');
    },
  } as unknown as DurableObjectNamespace;
}

describe('region configuration', () => {
  it('the default deployment has no region and no jurisdiction', () => {
    const c = cfg({});
    expect(c.HUB_REGION).toBeUndefined();
    expect(c.HUB_JURISDICTION).toBeUndefined();
    expect(c.HUB_JURISDICTION_EMULATION).toBe(false);
  });

  it('a jurisdiction needs a region, and only known jurisdictions and region-shaped names pass', () => {
    expect(() => cfg({ HUB_JURISDICTION: 'eu' })).toThrow(/HUB_JURISDICTION: needs HUB_REGION/);
    expect(() => cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'mars' })).toThrow(/HUB_JURISDICTION/);
    expect(() => cfg({ HUB_REGION: 'EU west' })).toThrow(/HUB_REGION/);
    expect(() => cfg({ DB_GATEWAY_LOCATION_HINT: 'moon' })).toThrow(/DB_GATEWAY_LOCATION_HINT/);
    for (const j of ['eu', 'us', 'fedramp', 'fedramp-high']) expect(cfg({ HUB_REGION: 'r', HUB_JURISDICTION: j }).HUB_JURISDICTION).toBe(j);
    // A region without a jurisdiction is valid: a named endpoint whose objects are placed as usual.
    expect(cfg({ HUB_REGION: 'apac' }).HUB_JURISDICTION).toBeUndefined();
    expect(cfg({ HUB_REGION: '' }).HUB_REGION).toBeUndefined();
  });

  it("the gateway's location hint must lie inside the jurisdiction, as a cluster's must", () => {
    expect(() => cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', DB_GATEWAY_LOCATION_HINT: 'wnam' })).toThrow(
      /DB_GATEWAY_LOCATION_HINT: location hint wnam lies outside jurisdiction eu/,
    );
    expect(cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', DB_GATEWAY_LOCATION_HINT: 'weur' }).DB_GATEWAY_LOCATION_HINT).toBe('weur');
    expect(cfg({ HUB_REGION: 'eu', DB_GATEWAY_LOCATION_HINT: 'wnam' }).DB_GATEWAY_LOCATION_HINT).toBe('wnam');
  });
});

describe('residency', () => {
  const eu = cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' });

  it('an object is where it must be when its jurisdiction is the deployment\'s', () => {
    expect(residencyProblem(id('x', 'eu'), eu)).toBeNull();
    expect(residencyProblem(id('x'), cfg({}))).toBeNull();
  });

  it('an unrestricted object, or one in another jurisdiction, must not serve a regional deployment; nor one with a jurisdiction the default one', () => {
    expect(residencyProblem(id('x'), eu)).toMatch(/jurisdiction \(none\) but region eu keeps its objects in eu/);
    expect(residencyProblem(id('x', 'fedramp'), eu)).toMatch(/jurisdiction fedramp/);
    expect(residencyProblem(id('x', 'eu'), cfg({}))).toMatch(/keeps its objects in \(no jurisdiction\)/);
  });

  it('on Cloudflare the real restricted namespace is used, even with the emulation flag set', () => {
    const ns = regionalNamespace(cloudflareNamespace(), cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', HUB_JURISDICTION_EMULATION: '1' }));
    const i = ns.idFromName('c/k');
    expect(i.jurisdiction).toBe('eu');
    expect(i.name).toBe('c/k');
  });

  it('on a runtime without jurisdictions, a regional deployment refuses to create objects unless emulation is asked for', () => {
    expect(() => regionalNamespace(workerdNamespace(), eu)).toThrow(/no Durable Object jurisdictions.*refusing/);
    const emu = cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', HUB_JURISDICTION_EMULATION: '1' });
    const i = regionalNamespace(workerdNamespace(), emu).idFromName('c/k');
    expect(jurisdictionOf(i, emu)).toBe('eu');
    expect(residencyProblem(i, emu)).toBeNull();
    // The same name unrestricted is another object, and one outside the jurisdiction.
    expect(i.name).not.toBe('c/k');
    expect(residencyProblem(id('c/k'), emu)).not.toBeNull();
  });

  it('under the emulation, an object whose id carries no name (started for its alarm after a restart: local workerd rebuilds the id without it) cannot be judged and is not taken for misplaced', () => {
    // Before, a regional hub restarted locally deleted its gateway shards' storage at their first
    // alarm and refused every call relayed through them.
    const emu = cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', HUB_JURISDICTION_EMULATION: '1' });
    const unnamed = { name: undefined, jurisdiction: undefined, toString: () => 'ab12', equals: () => false } as unknown as DurableObjectId;
    expect(residencyProblem(unnamed, emu)).toBeNull();
    // Without the emulation (Cloudflare, where the id itself carries the jurisdiction) it is judged.
    expect(residencyProblem(unnamed, eu)).toMatch(/jurisdiction \(none\) but region eu/);
    // A named object outside the emulated jurisdiction still is.
    expect(residencyProblem(id('c/k'), emu)).not.toBeNull();
  });

  it('an emulated name counts only under the emulation: a deployment without it never takes a name for a jurisdiction', () => {
    const emu = cfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', HUB_JURISDICTION_EMULATION: '1' });
    const i = regionalNamespace(workerdNamespace(), emu).idFromName('c/k');
    expect(jurisdictionOf(i, eu)).toBeNull();
    expect(residencyProblem(i, eu)).not.toBeNull();
  });

  it('the default deployment uses the namespace as it is', () => {
    const ns = workerdNamespace();
    expect(regionalNamespace(ns, cfg({}))).toBe(ns);
  });
});

describe('location hints inside a jurisdiction', () => {
  it('eu takes weur and eeur; us, fedramp and fedramp-high take wnam and enam; without a jurisdiction every hint', () => {
    expect(hintsWithin('eu')).toEqual(['weur', 'eeur']);
    for (const j of ['us', 'fedramp', 'fedramp-high'] as const) expect(hintsWithin(j)).toEqual(['wnam', 'enam']);
    expect(hintsWithin(undefined)).toEqual(LOCATION_HINTS);
    expect(hintsWithin(null)).toEqual(LOCATION_HINTS);
  });

  it('a hint outside the jurisdiction is refused with a reason naming both; inside it, or without one, it is not', () => {
    expect(hintOutsideJurisdiction('weur', 'eu')).toBeNull();
    expect(hintOutsideJurisdiction('eeur', 'eu')).toBeNull();
    expect(hintOutsideJurisdiction('enam', 'fedramp-high')).toBeNull();
    for (const h of ['wnam', 'enam', 'oc', 'apac', 'me'] as const) {
      expect(hintOutsideJurisdiction(h, 'eu')).toMatch(new RegExp(`location hint ${h} lies outside jurisdiction eu.*allowed here: weur, eeur`));
    }
    for (const j of ['us', 'fedramp', 'fedramp-high'] as const) expect(hintOutsideJurisdiction('weur', j)).toMatch(/allowed here: wnam, enam/);
    for (const h of LOCATION_HINTS) expect(hintOutsideJurisdiction(h, undefined)).toBeNull();
  });

  it('a stored hint outside the jurisdiction is ignored, not used; one inside it, or without a jurisdiction, is used', () => {
    expect(placementHint('wnam', 'eu')).toEqual({ hint: null, ignored: 'wnam' });
    expect(placementHint('weur', 'eu')).toEqual({ hint: 'weur', ignored: null });
    expect(placementHint('wnam', undefined)).toEqual({ hint: 'wnam', ignored: null });
    expect(placementHint(null, 'eu')).toEqual({ hint: null, ignored: null });
  });
});

describe('route keys (address.ts)', () => {
  it('a session id routes by its route key (a ULID, with the placement generation after a change); anything else does not route', () => {
    const key = newId();
    expect(routeKeyOf(`${key}.${newId()}`)).toBe(key);
    expect(routeKeyOf(`${key}-3.${newId()}`)).toBe(`${key}-3`);
    for (const bad of [null, undefined, '', key, `${key}.`, `${key}.nope`, `${key}.${newId()}x`, `x${key}.${newId()}`, `${key}-0.${newId()}`, `${key}-.${newId()}`, `${key}-x.${newId()}`, `${key}-1234567890.${newId()}`]) {
      expect(routeKeyOf(bad)).toBeNull();
    }
  });

  it('a route key carries the placement generation it was minted under; generation 0 keeps the key as it always was', () => {
    const id = newId();
    expect(newRouteKey(0, id)).toBe(id);
    expect(placementGenerationOf(newRouteKey(0, id))).toBe(0);
    expect(newRouteKey(7, id)).toBe(`${id}-7`);
    expect(placementGenerationOf(newRouteKey(7, id))).toBe(7);
    expect(routeKeyOf(`${newRouteKey(7, id)}.${newId()}`)).toBe(`${id}-7`);
  });
});
