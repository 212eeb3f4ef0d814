import type { Payload } from '../../protocol';
import { withDeadline } from '../deadline';
import { fetchFirstSnapshotPage } from './desired';
import { claimCluster, type ClaimArgs, type ClaimResult } from './ownership';
import type { Sql } from './sql';

/**
 * The first page of a fresh session's desired-state snapshot, read by the gateway right behind
 * the claim that granted the session, on its warm connection, and returned with the claim in the
 * same call. A fresh session owes its operator the hub's resync at once: with the page in hand it
 * numbers and stores a resync that fits the page in the same commit as its welcome, and the
 * session-to-gateway round trips of a separate page read and operations check (edge to database
 * region in a deployment) are gone. A separate statement, not part of the claim's: a desired-state
 * table that cannot be read (a migration holding it, say) must not stop sessions from opening; the
 * session then fetches the snapshot itself, with retries, as it does past this page.
 */
export interface ClaimSnapshot {
  /** Live deployments in deployment_id order, at most the rows and (but for the first) the bytes asked for. */
  deployments: Payload<'deployment.desired'>[];
  /**
   * Deployments may follow this page although it holds fewer than the rows asked for: it
   * reached its byte bound. (A page at its row limit is read as one that may have more anyway.)
   */
  more?: boolean;
  /** Unconcluded operations up to the claim's desired revision exist: the session must fetch them. */
  openOperations: boolean;
}

export type ClaimedSession = ClaimResult & { snapshot: ClaimSnapshot | null };

/** Raised when the page took longer than the claim may wait for it. */
export class PageDeadlineError extends Error {
  override readonly name = 'PageDeadlineError';
}

/**
 * The claim, and when it granted the fresh session id (and `rows` > 0) the first page of
 * that session's resync, at most `rows` deployments and about `bytes` (the page rides back in
 * the claim's RPC answer and is queued at once). A page that fails to load, or takes longer than `deadlineMs` (a
 * table held by a migration, say), is left to the session (`snapshot` null): the claim is
 * committed, and its answer must reach the session within the call's own deadline. Only the
 * claim's own failure fails the call.
 */
export async function claimWithSnapshot(
  sql: Sql,
  args: ClaimArgs,
  /** When the claim must reach Postgres by (arrival.ts), or null for no bound. */
  arriveBy: string | null,
  snapshot: {
    rows: number;
    bytes: number;
    deadlineMs: number;
    /**
     * When the caller's answer must be on its way (epoch ms): the page waits no later, and is not
     * read when the claim took until then. A claim that committed late and then waited out its page
     * answered after the session had given up on it, and nothing released it.
     */
    endBy?: number;
  },
  pageFailed: (err: unknown) => void,
): Promise<ClaimedSession> {
  const claim = await claimCluster(sql, args, arriveBy);
  if (snapshot.rows < 1 || claim.refusal !== null || claim.sessionId !== args.freshSessionId) return { ...claim, snapshot: null };
  const waitMs = Math.min(snapshot.deadlineMs, (snapshot.endBy ?? Infinity) - Date.now());
  if (!(waitMs > 0)) {
    pageFailed(new PageDeadlineError('no time left for the first snapshot page after the claim'));
    return { ...claim, snapshot: null };
  }
  // A page abandoned at the deadline still settles later, on the connection; nobody waits for it.
  const fence = { clusterUid: args.clusterUid, sessionId: claim.sessionId, generation: claim.generation as number, tokenHash: args.tokenHashHex };
  const page = fetchFirstSnapshotPage(sql, fence, claim.desiredRevision, snapshot.rows, snapshot.bytes);
  try {
    const read = await withDeadline(page, waitMs, () => {
      throw new PageDeadlineError(`first snapshot page not read within ${waitMs} ms`);
    });
    // Null: the claim was taken back (a rotation, a disable, a newer hello) before the page was
    // read. The session finds that out at its own fenced read, as it would without a page.
    return { ...claim, snapshot: read };
  } catch (err) {
    pageFailed(err);
    return { ...claim, snapshot: null };
  }
}
