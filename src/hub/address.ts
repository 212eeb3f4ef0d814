import { newId, ULID_RE } from '../protocol';
import { HubConfigError, hubConfig } from './config';
import { fnv1a } from './fnv';
import type { DbGateway } from './db/gateway';
import type { HubEnv } from './env';
import { regionalNamespace, type LocationHint } from './region';
import type { SessionObject } from './session/session-object';

/**
 * The one place that addresses Durable Objects: the names of session objects, the headers the
 * Worker hands them, and the stubs. Every lookup goes through here, so every object of a
 * regional deployment is created in its jurisdiction (region.ts) and no caller can forget it.
 */

/** Headers the Worker sets on the upgrade it forwards; never taken from the operator. */
export const INTERNAL_HEADERS = {
  clusterUid: 'x-wingsmith-cluster-uid',
  clusterName: 'x-wingsmith-cluster-name',
  tokenHash: 'x-wingsmith-token-hash',
  routeKey: 'x-wingsmith-route-key',
  remoteAddr: 'x-wingsmith-remote-addr',
} as const;

/**
 * A route key names a session's object within its cluster: a ULID minted when the object was
 * first addressed, then `-<generation>` when the cluster's placement has changed (its hint's
 * placement generation, registry.ts). Placement is fixed when an object is created, so the
 * generation is part of the object's name: a key only ever reaches an object created under the
 * placement it was minted with. Generation 0 adds nothing, so the keys (and objects) of clusters
 * whose placement never changed are what they were before generations existed.
 */
const ROUTE_KEY_RE = /^[0-9A-HJKMNP-TV-Z]{26}(?:-([1-9][0-9]{0,8}))?$/;

/** A new route key, for a new object under the cluster's current placement generation. */
export function newRouteKey(placementGeneration: number, id: string = newId()): string {
  return placementGeneration > 0 ? `${id}-${placementGeneration}` : id;
}

/** The placement generation a route key was minted under. */
export function placementGenerationOf(routeKey: string): number {
  return Number(ROUTE_KEY_RE.exec(routeKey)?.[1] ?? 0);
}

/**
 * The route key part of a session id (`<route key>.<incarnation>`, the incarnation a ULID), or
 * null when the hint does not route. Routing is keyed by the token's cluster and this key, so
 * whatever an attacker writes here can only ever reach an object of the cluster its token
 * belongs to.
 */
export function routeKeyOf(hint: string | undefined | null): string | null {
  if (!hint) return null;
  const dot = hint.indexOf('.');
  if (dot < 0) return null;
  const key = hint.slice(0, dot);
  return ROUTE_KEY_RE.test(key) && ULID_RE.test(hint.slice(dot + 1)) ? key : null;
}

export function sessionObjectName(clusterUid: string, routeKey: string): string {
  return `${clusterUid}/${routeKey}`;
}

export interface SessionAddress {
  clusterUid: string;
  routeKey: string;
  /**
   * The cluster's placement hint. Only the first `get()` of an object honours one, so it matters
   * when the connect route starts a new object; elsewhere it is harmless and may be omitted.
   */
  locationHint?: LocationHint | null;
}

/**
 * Throws a HubConfigError (every request 503 `unconfigured`, app.ts) when this deployment cannot
 * address its objects: a jurisdiction the runtime refuses, or one local workerd lacks without
 * the emulation. Checked before any route, since each route would otherwise meet it at its
 * first stub and report a database outage (the gateway is reached through a stub too).
 */
export function checkAddressing(env: HubEnv): void {
  const cfg = hubConfig(env);
  if (!cfg.HUB_JURISDICTION) return;
  try {
    // Cached per namespace once resolved: a request pays a map lookup for each.
    regionalNamespace(env.SESSIONS, cfg);
    regionalNamespace(env.DB_GATEWAY, cfg);
  } catch (err) {
    throw new HubConfigError('HUB_JURISDICTION', err instanceof Error ? err.message : String(err));
  }
}

/** The stub of a session's object, in this deployment's jurisdiction. */
export function sessionStub(env: HubEnv, addr: SessionAddress): DurableObjectStub<SessionObject> {
  const ns = regionalNamespace(env.SESSIONS, hubConfig(env));
  const id = ns.idFromName(sessionObjectName(addr.clusterUid, addr.routeKey));
  const stub = addr.locationHint ? ns.get(id, { locationHint: addr.locationHint }) : ns.get(id);
  return stub as DurableObjectStub<SessionObject>;
}

/** One of the gateway's shards (src/hub/db/gateway.ts), in this deployment's jurisdiction. */
export function gatewayStub(env: HubEnv, shard: number): DurableObjectStub<DbGateway> {
  const cfg = hubConfig(env);
  const ns = regionalNamespace(env.DB_GATEWAY, cfg);
  const id = ns.idFromName(`shard-${shard}`);
  const stub = cfg.DB_GATEWAY_LOCATION_HINT ? ns.get(id, { locationHint: cfg.DB_GATEWAY_LOCATION_HINT }) : ns.get(id);
  return stub as DurableObjectStub<DbGateway>;
}

/**
 * Which gateway shard runs the fleet poll for a cluster's sessions: fixed by the cluster, so its
 * sessions (the owner and any it displaced) are watched by one poller. FNV-1a over the uid.
 */
export function pollShardOf(clusterUid: string, shards: number): number {
  return fnv1a(clusterUid) % shards;
}


