import type { MiddlewareHandler } from 'hono';
import { HubConfigError, hubConfig } from './config';
import { failureLine } from './db/errors';
import { jsonError } from './http-errors';
import { gatewaySql } from './db/gateway-client';
import { claimDatabaseRegion, foreignDatabase } from './db/region-claim';
import type { HubEnv } from './env';
import { createLogger } from './log';
import { regionName } from './region';

const regionLog = createLogger({ component: 'db-region' });

/**
 * The database's region as this isolate found it (db/region-claim.ts): read at its first request,
 * then only compared. A refusal is kept too (nothing but a new secret or the README's update
 * mends it, and either comes with a new isolate: a deploy, or the renamed region's). A failed
 * read is not an answer: kept neither way, read again at the next request.
 */
let regionChecked: { env: object; key: string; refusal: HubConfigError | null } | null = null;
let regionChecking: { key: string; done: Promise<boolean> } | null = null;
/** Failed region reads this isolate has logged, by what they said: an outage would write one per request. */
const regionReadFailures = new Set<string>();

/**
 * Middleware: the database is this region's, read at the isolate's first request that uses it (a
 * cached answer after), or the request is refused (`HubConfigError`, a 503 naming the variable).
 * A read that failed (the database slow or away) lets a read through, whose route meets the
 * database's state itself; a write or a connect is answered 503 `unavailable` instead: let
 * through, it could register a cluster, change desired state or take a claim in another region's
 * database, which nothing after this point checks again.
 */
export const databaseRegion: MiddlewareHandler<{ Bindings: HubEnv }> = async (c, next) => {
  const reading = checkDatabaseRegion(c.env);
  const known = reading ? await reading : true;
  if (!known && (c.req.method !== 'GET' && c.req.method !== 'HEAD' || c.req.path === '/v1/connect')) {
    c.header('Retry-After', '5');
    return jsonError(c, 503, 'unavailable', "the database's region could not be read; retry with backoff");
  }
  await next();
};

/**
 * Throws the refusal kept for this database; a promise only while the region is still to be read,
 * resolving to whether it was (false: the read failed, and is tried again at the next request).
 */
export function checkDatabaseRegion(env: HubEnv): Promise<boolean> | undefined {
  const checked = regionChecked;
  if (checked?.env !== env) return readDatabaseRegionOnce(env);
  if (checked.refusal) throw checked.refusal;
  return undefined;
}

async function readDatabaseRegionOnce(env: HubEnv): Promise<boolean> {
  const checked = regionChecked;
  const mine = regionName(hubConfig(env));
  const key = `${mine}\n${env.DATABASE_URL}`;
  if (checked?.key === key) {
    regionChecked = { ...checked, env };
    if (checked.refusal) throw checked.refusal;
    return true;
  }
  if (regionChecking?.key !== key) {
    const done = readDatabaseRegion(env, mine, key).finally(() => {
      if (regionChecking?.done === done) regionChecking = null;
    });
    regionChecking = { key, done };
  }
  const known = await regionChecking.done;
  if (regionChecked?.key === key && regionChecked.refusal) throw regionChecked.refusal;
  return known;
}

/** Whether the region was read (a refusal or an answer kept, or the database unclaimed and refusing writes). */
async function readDatabaseRegion(env: HubEnv, mine: string, key: string): Promise<boolean> {
  let claimed: string | null;
  try {
    ({ claimed } = await claimDatabaseRegion(gatewaySql(env), mine));
  } catch (err) {
    // The request goes on to its route, which meets the database's state itself and answers as
    // it always has (an outage stays "unavailable", never "unconfigured").
    const line = failureLine('reading the database\'s region', err);
    if (regionReadFailures.size < 20 && !regionReadFailures.has(line.fields.error)) {
      regionReadFailures.add(line.fields.error);
      regionLog[line.level](`${line.message}; read again at the next request`, line.fields);
    }
    return false;
  }
  // Unclaimed and refusing writes (/healthz says so): nothing can be claimed, or written, through
  // it until it is fixed; read again at the next request.
  if (claimed === null) return true;
  regionChecked = { env, key, refusal: foreignDatabase(claimed, mine) };
  return true;
}
