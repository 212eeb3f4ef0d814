import { routeKeyOf, sessionStub } from '../address';
import { describeError } from '../db/errors';
import type { PokeReason } from '../db/fleet-poll';
import type { HubEnv } from '../env';
import { createLogger } from '../log';

const log = createLogger({ component: 'admin' });

/**
 * A cluster was just disabled or given a new token: have its live session check its claim now,
 * so it is cut (4403) at once rather than at its next fleet poll. The poll stays the bound (the
 * spec's) when this poke is lost; the admin's answer does not wait for it.
 */
export async function cutLiveSession(env: HubEnv, clusterUid: string, session: string | null, why: Extract<PokeReason, 'token' | 'disabled'>): Promise<void> {
  try {
    const routeKey = routeKeyOf(session);
    if (!session || !routeKey) return;
    await sessionStub(env, { clusterUid, routeKey }).check(session, why);
  } catch (err) {
    log.warn('could not poke the live session of a revoked cluster; its fleet poll will cut it', { cluster: clusterUid, why, error: describeError(err) });
  }
}
