import type { HubConfig } from '../config';
import { answerMarginMs } from '../pg';
import { sendWithinMs } from './gateway-client';

/**
 * The time an admin write must reach Postgres by (migration 0030, `wingsmith_arrived_by`), as an
 * ISO timestamp from this clock. A shard sends a write within `sendWithin` (at most
 * `sendWithinMs`) of being asked or not at all, and stops waiting for its answer
 * `PG_QUERY_TIMEOUT_MS` and a margin after sending it; a write that arrives past this deadline
 * arrived after its caller may have been answered 504 (and repeated it), and writes nothing. Half
 * the margin is left for the hop to the database. A database clock ahead of this one by more than
 * that refuses writes (a 503, loudly); one behind it by less than the statement timeout still
 * refuses what arrives after the caller could have been answered.
 */
export function arrivalDeadline(cfg: Pick<HubConfig, 'PG_QUERY_TIMEOUT_MS'>, sendWithin: number = sendWithinMs(cfg), now: number = Date.now()): string {
  return new Date(now + Math.min(sendWithin, cfg.PG_QUERY_TIMEOUT_MS) + answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS) / 2).toISOString();
}
