import type { HubConfig } from '../config';
import { answerMarginMs } from '../pg';

/**
 * The time an admin write must reach Postgres by (migration 0030, `wingsmith_arrived_by`), as an
 * ISO timestamp from this clock, taken when the hub takes the write. The hub gives up on a write's
 * answer `PG_QUERY_TIMEOUT_MS` and a margin after handing it to a connection, no sooner than that
 * after now; a write that arrives later arrived after its caller may have been answered 504 (and
 * repeated it), and writes nothing. Half the margin is kept back. A database clock ahead of this
 * one by nearly the whole timeout refuses writes (a 503, loudly); one behind it by less than half
 * the margin still refuses what arrives after the caller could have been answered.
 */
export function arrivalDeadline(cfg: Pick<HubConfig, 'PG_QUERY_TIMEOUT_MS'>, now: number = Date.now()): string {
  return new Date(now + cfg.PG_QUERY_TIMEOUT_MS + answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS) / 2).toISOString();
}
