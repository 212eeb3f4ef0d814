import { z } from 'zod';
import type { HubConfig } from './config';

/**
 * Regions and data residency (issue 14, DESIGN decision 11). A region is a wrangler environment
 * with its own route, database and secrets; when its configuration names a Durable Object
 * jurisdiction, every object of the deployment lives in the jurisdiction-restricted namespace,
 * and an object that finds itself outside it refuses to serve.
 */

/**
 * Durable Object jurisdictions: `eu` and `fedramp` (Cloudflare's data-location page), `us`
 * (added 2026-06), `fedramp-high` (the runtime's own type, workers-types 2026-07).
 */
export const JURISDICTIONS = ['eu', 'us', 'fedramp', 'fedramp-high'] as const;
export type Jurisdiction = (typeof JURISDICTIONS)[number];

/**
 * Location hints for a new Durable Object, as documented (and typed by the runtime). Cloudflare
 * says `sam`, `afr` and `me` currently fall back to a nearby region; they stay valid requests.
 */
export const LOCATION_HINTS = ['wnam', 'enam', 'sam', 'weur', 'eeur', 'apac', 'apac-ne', 'apac-se', 'oc', 'afr', 'me'] as const;
export type LocationHint = (typeof LOCATION_HINTS)[number];
export const LocationHintSchema = z.enum(LOCATION_HINTS);

/**
 * The hints that lie inside each jurisdiction. A jurisdiction-restricted object always runs and
 * stores inside its jurisdiction (Cloudflare's data-location page), so a hint outside it could
 * never be honoured: a deployment with a jurisdiction takes only these.
 */
const HINTS_IN_JURISDICTION: Record<Jurisdiction, readonly LocationHint[]> = {
  eu: ['weur', 'eeur'],
  us: ['wnam', 'enam'],
  fedramp: ['wnam', 'enam'],
  'fedramp-high': ['wnam', 'enam'],
};

/** The hints a deployment may create objects with: every one without a jurisdiction. */
export function hintsWithin(jurisdiction: Jurisdiction | null | undefined): readonly LocationHint[] {
  return jurisdiction ? HINTS_IN_JURISDICTION[jurisdiction] : LOCATION_HINTS;
}

/** Why a deployment in `jurisdiction` cannot take `hint`, or null when it can. */
export function hintOutsideJurisdiction(hint: LocationHint, jurisdiction: Jurisdiction | null | undefined): string | null {
  const within = hintsWithin(jurisdiction);
  if (within.includes(hint)) return null;
  return `location hint ${hint} lies outside jurisdiction ${jurisdiction}, where this deployment's objects always run (allowed here: ${within.join(', ')})`;
}

/**
 * A stored hint split into the one this deployment places objects with and the one it ignores: a
 * hint stored before the region had its jurisdiction may lie outside it (the admin API refuses it
 * now). Passed to a restricted namespace it would ask for a placement that cannot be.
 */
export function placementHint(
  hint: LocationHint | null,
  jurisdiction: Jurisdiction | null | undefined,
): { hint: LocationHint | null; ignored: LocationHint | null } {
  if (hint && hintOutsideJurisdiction(hint, jurisdiction)) return { hint: null, ignored: hint };
  return { hint, ignored: null };
}

/** A region's name: short, lowercase, safe in a hostname, a log line and an error message. */
export const REGION_NAME_RE = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/**
 * The default deployment's name where a region must be named (a log line, the database's claim,
 * migration 0025): no region name can be it, since REGION_NAME_RE takes no parentheses.
 */
export const DEFAULT_REGION = '(default)';

/** This deployment's region as a name: HUB_REGION, or DEFAULT_REGION when unset. */
export function regionName(cfg: Pick<HubConfig, 'HUB_REGION'>): string {
  return cfg.HUB_REGION ?? DEFAULT_REGION;
}

/**
 * Local workerd has no jurisdictions (`ns.jurisdiction()` throws "Jurisdiction restrictions are
 * not implemented in workerd", checked with workerd 1.20260426 and in workerd's source as of
 * 2026-08). With HUB_JURISDICTION_EMULATION set, and only on such a runtime, a restricted
 * namespace is emulated: the object's name carries the jurisdiction, as a real id encodes it,
 * so names never collide across jurisdictions and the object can read its own. On Cloudflare
 * the real namespace is always used, whatever the flag says.
 */
const EMULATED_PREFIX = '~jurisdiction:';

/** What address.ts needs of a namespace: the real one, a restricted one, or the local emulation. */
export interface ObjectNamespace {
  idFromName(name: string): DurableObjectId;
  get(id: DurableObjectId, options?: DurableObjectNamespaceGetDurableObjectOptions): DurableObjectStub;
}

const restricted = new WeakMap<DurableObjectNamespace, { cfg: HubConfig; sub: ObjectNamespace }>();

/** The namespace this deployment creates its objects in: jurisdiction-restricted when configured. */
export function regionalNamespace(ns: DurableObjectNamespace, cfg: HubConfig): ObjectNamespace {
  const j = cfg.HUB_JURISDICTION;
  if (!j) return ns;
  const cached = restricted.get(ns);
  if (cached?.cfg === cfg) return cached.sub;
  let sub: ObjectNamespace;
  try {
    // `us` is newer than the pinned workers-types; the runtime takes any jurisdiction it knows.
    sub = ns.jurisdiction(j as DurableObjectJurisdiction);
  } catch (err) {
    // The only input is the configured jurisdiction: whatever the runtime says, the var is wrong here.
    if (!runtimeLacksJurisdictions(err)) throw new Error(`the runtime refuses Durable Object jurisdiction ${j}: ${err instanceof Error ? err.message : String(err)}`);
    if (!cfg.HUB_JURISDICTION_EMULATION) {
      throw new Error(
        `this runtime has no Durable Object jurisdictions, and HUB_JURISDICTION is ${j}: ` +
          'refusing to create objects outside it (locally, npm start emulates it; see the README)',
      );
    }
    sub = {
      idFromName: (name) => ns.idFromName(`${EMULATED_PREFIX}${j}/${name}`),
      get: (id, options) => ns.get(id, options),
    };
  }
  restricted.set(ns, { cfg, sub });
  return sub;
}

function runtimeLacksJurisdictions(err: unknown): boolean {
  return err instanceof Error && /not implemented in workerd/i.test(err.message);
}

/**
 * The jurisdiction an object was created in: the platform's `ctx.id.jurisdiction`; under the
 * local emulation, the one its name carries.
 */
export function jurisdictionOf(id: DurableObjectId, cfg: HubConfig): string | null {
  if (id.jurisdiction) return id.jurisdiction;
  if (cfg.HUB_JURISDICTION_EMULATION && id.name?.startsWith(EMULATED_PREFIX)) {
    const rest = id.name.slice(EMULATED_PREFIX.length);
    return rest.slice(0, rest.indexOf('/')) || null;
  }
  return null;
}

/** Why this object must not serve this deployment, or null when it lives where it must (session/residency-gate.ts, db/gateway.ts). */
export function residencyProblem(id: DurableObjectId, cfg: HubConfig): string | null {
  // Under the local emulation the jurisdiction is read from the name, and an object that local
  // workerd starts for its alarm after a restart has an id without one (rebuilt from the hex id):
  // it cannot be judged. Judged as outside, a regional hub restarted with `npm start` deleted its
  // own gateway shards' and sessions' storage and refused their calls.
  if (cfg.HUB_JURISDICTION_EMULATION && !id.jurisdiction && id.name === undefined) return null;
  const expected = cfg.HUB_JURISDICTION ?? null;
  const actual = jurisdictionOf(id, cfg);
  if (actual === expected) return null;
  return (
    `object is in jurisdiction ${actual ?? '(none)'} but region ${regionName(cfg)} ` +
    `keeps its objects in ${expected ?? '(no jurisdiction)'}`
  );
}

/** Additive `welcome` field: the region the operator reached (absent on the default deployment). */
export function welcomeRegion(cfg: HubConfig): { region?: string } {
  return cfg.HUB_REGION ? { region: cfg.HUB_REGION } : {};
}

/** "… in region eu" when the deployment is regional: a wrong endpoint is obvious in an operator's log. */
export function inRegion(cfg: HubConfig): string {
  return cfg.HUB_REGION ? ` in region ${cfg.HUB_REGION}` : '';
}
