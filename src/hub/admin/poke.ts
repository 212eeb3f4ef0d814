import { routeKeyOf, sessionStub } from '../address';
import type { DesiredChange } from '../db/desired';
import type { HubEnv } from '../env';
import { createLogger } from '../log';

const log = createLogger({ component: 'admin' });

/**
 * Tell the owning session that desired state changed, so it sends now instead of at its next
 * poll. With the change itself the session can send it without reading it back when nothing
 * came between. Best effort: the poll picks up anything a poke misses.
 */
export function pokeOwner(
  env: HubEnv,
  ctx: { waitUntil(p: Promise<unknown>): void },
  clusterUid: string,
  ownerSession: string | null,
  revision: number,
  change?: DesiredChange,
): void {
  const key = routeKeyOf(ownerSession);
  if (!key) return;
  // The owner's object exists already: no placement hint to give.
  const stub = sessionStub(env, { clusterUid, routeKey: key });
  ctx.waitUntil(
    stub.poke(revision, change).catch((err: unknown) => {
      log.warn('poke failed; the session will pick the change up on its poll', { cluster: clusterUid, error: String(err) });
    }),
  );
}
