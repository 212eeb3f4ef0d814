import { gatewayStub, pollShardOf } from '../address';
import { hubConfig, type HubConfig } from '../config';
import { withDeadline } from '../deadline';
import type { HubEnv } from '../env';
import { fnv1a } from '../fnv';
import { answerMarginMs } from '../pg';
import type { ClaimedSession } from './claim-snapshot';
import type { DesiredWriteRequest, DesiredWriteResult } from './desired-relay';
import type { ClaimArgs } from './ownership';
import type { Sql } from './sql';

/*
 * How the Worker and the session objects call a gateway shard (gateway.ts): which shard, how long
 * they wait, and a relayed database error rethrown with its SQLSTATE.
 */

export type Relayed<T> =
  | { ok: true; value: T }
  /** `unknown`: the statement may have committed all the same (pg.ts `outcomeUnknown`). */
  | { ok: false; message: string; code: string | null; name: string; unknown?: boolean };
export type GatewayResult = Relayed<{ rows: Record<string, unknown>[]; rowCount: number | null }>;

/** A database error relayed by the gateway, with its SQLSTATE kept. */
export class GatewayQueryError extends Error {
  constructor(
    message: string,
    readonly code: string | null,
    override readonly name: string,
    /** The statement may have committed all the same: unanswered, or its connection lost under it. */
    readonly outcomeUnknown = false,
  ) {
    super(message);
  }
}

/**
 * Whether a statement relayed by the gateway may have committed although it failed: its outcome
 * was unknown to the gateway, or the gateway's own answer never came (its deadline, a failed call).
 * Only an answer that says so (the server's error, a statement never sent) rules it out, and so
 * does the runtime's refusal of an overloaded shard (`.overloaded`: the call was queued past what
 * the object takes and refused there, before the shard ran anything), which is a 503 to retry later.
 */
export function mayHaveCommitted(err: unknown): boolean {
  if (err instanceof GatewayQueryError) return err.outcomeUnknown;
  return !(typeof err === 'object' && err !== null && (err as { overloaded?: unknown }).overloaded === true);
}

/**
 * How long the Worker waits for a shard's answer: the shard's wait for a statement's answer (its
 * deadline and the margin that lets the server's refusal come first, pg.ts) and two seconds for
 * the hops.
 */
function gatewayDeadlineMs(cfg: Pick<HubConfig, 'PG_QUERY_TIMEOUT_MS'>): number {
  return cfg.PG_QUERY_TIMEOUT_MS + answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS) + 2_000;
}

/**
 * How long a statement the shard relays may wait before it is sent (for a connection, and a PUT
 * behind its cluster's statement first, `PutCoalescer`): what is left of the Worker's wait after
 * the statement's own deadline, less half a second for the hops. Past it the statement is not
 * sent: sent, it could commit after the Worker answered 503 "retry" (a connection slow to open,
 * a database restarting, had a statement sent 3 s late commit after that answer).
 */
export function sendWithinMs(cfg: Pick<HubConfig, 'PG_QUERY_TIMEOUT_MS'>): number {
  return gatewayDeadlineMs(cfg) - cfg.PG_QUERY_TIMEOUT_MS - answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS) - 500;
}


/** Call a shard (chosen at random per call unless given) with a deadline; a relayed database error is rethrown with its SQLSTATE. */
async function viaGateway<T>(env: HubEnv, call: (stub: DbGatewayStub) => Promise<Relayed<T>>, shard?: number): Promise<T> {
  const cfg = hubConfig(env);
  const timeoutMs = gatewayDeadlineMs(cfg);
  const stub = gatewayStub(env, shard ?? Math.floor(Math.random() * cfg.DB_GATEWAY_SHARDS)) as unknown as DbGatewayStub;
  const r = await withDeadline(call(stub), timeoutMs, () => {
    throw new GatewayQueryError(`database gateway did not answer in ${timeoutMs} ms`, null, 'QueryTimeoutError', true);
  });
  if (!r.ok) throw new GatewayQueryError(r.message, r.code, r.name, r.unknown === true);
  return r.value;
}

/**
 * What a relayed statement is: `read` (and most) waits its turn on the least busy connection;
 * `write` (an admin write) is sent only within a short wait or not at all, ahead of the others
 * waiting (`Pg.within`); `public` is one anyone can cause without a credential (the connect
 * route's token lookup), which waits behind every other (`Pg.low`).
 */
export type GatewayLane = 'read' | 'write' | 'public';

/** An `Sql` that runs each statement on one of the gateway's shards. */
export function gatewaySql(env: HubEnv, lane: GatewayLane = 'read'): Sql {
  return {
    async query<R = Record<string, unknown>>(text: string, params: unknown[] = [], name?: string) {
      const r = await viaGateway(env, (stub) => stub.query(text, params, name, lane === 'write', lane === 'public' ? 'public' : undefined));
      return { rows: r.rows as R[], rowCount: r.rowCount };
    },
  };
}

/**
 * An admin write of desired state through a gateway shard, which pokes the owning session itself.
 * A cluster's writes all go to one shard (by its id as given), where concurrent PUTs coalesce.
 */
export function gatewayWriteDesired(env: HubEnv, req: DesiredWriteRequest): Promise<DesiredWriteResult | null> {
  const taken = { ...req, takenAt: req.takenAt ?? Date.now() };
  return viaGateway(env, (stub) => stub.writeDesired(taken), shardOf(req.cluster, hubConfig(env).DB_GATEWAY_SHARDS));
}

/**
 * A session's claim through a gateway shard, with its first snapshot page when fresh
 * (claim-snapshot.ts). Always the cluster's poll shard: its claim lane then holds every claim of
 * the cluster, so a burst of them waiting on its owner row holds one connection of the gateway,
 * not one in every shard.
 */
export function gatewayClaim(env: HubEnv, args: ClaimArgs, snapshotRows: number): Promise<ClaimedSession> {
  const taken = { ...args, takenAt: args.takenAt ?? Date.now() };
  return viaGateway(env, (stub) => stub.claim(taken, snapshotRows), pollShardOf(args.clusterUid, hubConfig(env).DB_GATEWAY_SHARDS));
}

/** A stable shard for a key (FNV-1a): the same cluster reference always reaches the same shard. */
export function shardOf(key: string, shards: number): number {
  return fnv1a(key) % shards;
}

interface DbGatewayStub {
  query(text: string, params: unknown[], name?: string, strict?: boolean, lane?: 'public'): Promise<GatewayResult>;
  claim(args: ClaimArgs, snapshotRows: number): Promise<Relayed<ClaimedSession>>;
  writeDesired(req: DesiredWriteRequest): Promise<Relayed<DesiredWriteResult | null>>;
}
