import { ULID_RE } from '../protocol';
import { hubConfig } from './config';
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
 * The route key part of a session id (`<route key>.<incarnation>`, both ULIDs), or null when
 * the hint does not route. Routing is keyed by the token's cluster and this key, so whatever an
 * attacker writes here can only ever reach an object of the cluster its token belongs to.
 */
export function routeKeyOf(hint: string | undefined | null): string | null {
  if (!hint) return null;
  const dot = hint.indexOf('.');
  if (dot !== 26 || hint.length !== 53) return null;
  const key = hint.slice(0, 26);
  return ULID_RE.test(key) && ULID_RE.test(hint.slice(27)) ? key : null;
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

/** The gateway shard that polls this cluster's sessions. */
export function pollerStub(env: HubEnv, clusterUid: string): DurableObjectStub<DbGateway> {
  return gatewayStub(env, pollShardOf(clusterUid, hubConfig(env).DB_GATEWAY_SHARDS));
}

