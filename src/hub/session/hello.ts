import { storableText } from '../storable-text';
import { buildFrame, CloseCode, newId } from '../../protocol';
import { pollShardOf } from '../address';
import type { HubConfig } from '../config';
import { failureLine } from '../db/errors';
import { mayHaveCommitted } from '../db/gateway-client';
import { inRegion } from '../region';
import type { ClaimedSession, ClaimSnapshot } from '../db/claim-snapshot';
import type { ClaimArgs } from '../db/ownership';
import type { Logger } from '../log';
import { checkHello, displacementLog, freshSessionMeta, localFreshReason, REFUSAL_ERRORS, resumeAfterClaim, welcomePayload } from './handshake';
import type { SessionState } from './session-state';
import type { Attachment, Sockets } from './sockets';

export interface HelloHost {
  cfg: HubConfig;
  /**
   * The claim (one short statement on the shared gateway), with the first page of the resync
   * when it grants a fresh session.
   */
  claim(args: ClaimArgs): Promise<ClaimedSession>;
  baseLog: Logger;
  state: SessionState;
  sockets: Sockets;
  /** Let nothing unapplied settle after the cursor is reported. */
  quiesceIngest(): Promise<void>;
  /** Drop what was queued but not numbered. */
  resetOutgoing(): void;
  /**
   * The claim committed: Postgres now shows `sessionId` connected at `generation`, whether or not
   * this hello goes on to open it (its socket may close first); the host publishes the disconnect
   * of one that does not open.
   */
  committed(sessionId: string, generation: number): void;
  /** The claim is this session's: join the fleet poll, poke the session it displaced. */
  claimed(clusterUid: string, routeKey: string, previous: string | null): void;
  /**
   * The session is open on this connection and the welcome is out; the cluster's desired revision
   * now, and for a fresh session the first page of its resync, read by the claim.
   */
  opened(desiredRevision: number, snapshot: ClaimSnapshot | null): Promise<void>;
}

/** Why a resume the database went back under is opened fresh (the claim's `back`). */
const WENT_BACK_AT_CLAIM = 'the database went back under the session (restored from a backup?); a resume would mix its older rows with the newer stream';

/**
 * Answer a connection's first frame: check the hello, claim the cluster (one statement that also
 * decides whether a resume is still this session's), supersede any older connection of the
 * session, then open it fresh or resumed and welcome it, re-sending what the operator has not
 * acknowledged.
 */
export async function answerHello(host: HelloHost, ws: WebSocket, att: Attachment, text: string): Promise<void> {
  const { cfg, state, sockets } = host;
  const log = host.baseLog.child({ cluster: att.clusterUid });
  const checked = checkHello(text, { uid: att.clusterUid, name: att.clusterName }, cfg.HUB_VERSION);
  if (!checked.ok) return sockets.refuse(ws, checked.close, checked.replyTo, checked.code, checked.message);
  const { hello, replyTo } = checked;
  if (checked.fromSource) log.info('operator built from source admitted', { operator_version: hello.operator_version });

  const meta = state.meta;
  const local = localFreshReason(meta, hello, att.tokenHash, state.outbound);
  const freshSessionId = `${att.routeKey}.${newId()}`;
  const resume = local === null && meta ? { sessionId: meta.sessionId, generation: meta.generation } : null;
  let claim: ClaimedSession;
  try {
    claim = await host.claim({
      clusterUid: att.clusterUid,
      tokenHashHex: att.tokenHash,
      resume,
      freshSessionId,
      live: { connected: true },
      remoteAddr: att.remoteAddr,
      // Any string is admitted as a source build's version; Postgres text cannot hold all of them.
      operatorVersion: storableText(hello.operator_version, 128),
      contention: { windowMs: cfg.CONTENTION_WINDOW_MS, threshold: cfg.CONTENTION_THRESHOLD, quietMs: cfg.CONTENTION_QUIET_MS },
      pollShard: pollShardOf(att.clusterUid, cfg.DB_GATEWAY_SHARDS),
      watermark: local === null && meta ? meta.desiredWatermark : 0,
      ingestCommits: local === null && meta ? (meta.ingestCommits ?? 0) : 0,
    });
  } catch (err) {
    const line = failureLine('claim', err);
    log[line.level](line.message, line.fields);
    // A resume's claim whose answer was lost may have committed all the same, moving the session
    // to a generation no connection here holds, and been released (no longer connected, out of
    // the fleet poll). An older connection of the session would then be fenced off from every
    // write, yet out of reach of the poll and of a revocation's poke, and an operator that only
    // pings would keep it open through a disable or a token rotation. The operator has dialled
    // again anyway: it resumes on one connection. (A claim the server refused, or that was never
    // sent, changed nothing: the older connection stays as it was.)
    if (resume && mayHaveCommitted(err)) {
      for (const other of sockets.others(ws)) {
        sockets.sendError(other, null, 'unavailable', "a newer connection's resume of this session could not be confirmed; reconnect", true);
        sockets.close(other, CloseCode.TRY_AGAIN_LATER, 'resume not confirmed');
      }
    }
    return sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, replyTo, 'unavailable', 'registry unavailable; retry', true);
  }
  if (claim.refusal) {
    const e = REFUSAL_ERRORS[claim.refusal];
    log.warn('session refused at hello', { reason: claim.refusal });
    // As at the connect: the message says where the operator dialled (a moved cluster is disabled in its old region).
    return sockets.refuse(ws, CloseCode.REFUSED, replyTo, e.code, `${e.message}${inRegion(cfg)}`);
  }
  if (claim.displacement) {
    const d = displacementLog(claim.displacement, claim.contentionStarted);
    log[d.level](d.message, d.fields);
  }
  if (claim.sessionId !== null && claim.generation !== null) host.committed(claim.sessionId, claim.generation);
  const freshReason = claim.wentBack && local === null ? WENT_BACK_AT_CLAIM : resumeAfterClaim(local, meta?.sessionId, claim.sessionId);
  if (freshReason === WENT_BACK_AT_CLAIM) {
    // As loud as the cut of a live session for the same (fleet-member.ts): a restore wants a person.
    log.error(`the database went back (restored from a backup?): the session is not resumed; a fresh one resyncs both ways`, {
      session: meta?.sessionId,
      watermark: meta?.desiredWatermark ?? 0,
      desired_revision: claim.desiredRevision,
      ingest_commits: meta?.ingestCommits ?? 0,
    });
  }
  if (freshReason === null) state.adoptGeneration(claim.generation as number);

  // The claim is this hello's: any older connection of the session is superseded, also when this
  // one closed while the claim ran. Kept, it would carry on under the generation just adopted,
  // and with it a claim this hello renewed: one taken after a disable and an enable that the
  // older connection lived through (the disable's poke, answered after the hello, checks the
  // renewed claim), so it would never be cut and what it sent since the disable would be stored.
  for (const other of sockets.others(ws)) {
    sockets.sendError(other, null, 'conflict', 'superseded by a newer connection for this session', false);
    sockets.close(other, CloseCode.DISPLACED, 'superseded by a newer connection');
  }
  await host.quiesceIngest();
  host.resetOutgoing();
  if (ws.readyState !== WebSocket.OPEN) return;

  // Only now, with nothing left that could number a frame on the old connection, is the point to
  // re-send from final (taken before the claim, frames numbered meanwhile would be skipped).
  if (freshReason === null) {
    const resumeFrom = hello.resume_from as number;
    const problem = state.outbound.resumeProblem(resumeFrom);
    if (problem !== null) {
      return sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, replyTo, 'unavailable', `resume point changed during the handshake (${problem}); reconnect`, true);
    }
    state.outbound.acknowledge(resumeFrom);
  }
  const now = Date.now();
  const generation = claim.generation as number;
  const m =
    freshReason === null && meta
      ? state.resume(meta, generation, now)
      : state.openFresh((out) =>
          freshSessionMeta({
            sessionId: freshSessionId,
            cluster: { uid: att.clusterUid, name: att.clusterName },
            tokenHash: att.tokenHash,
            routeKey: att.routeKey,
            generation,
            desiredRevision: claim.desiredRevision,
            out,
            now,
          }),
        );
  sockets.activate(ws, att, m.sessionId);
  const fresh = freshReason !== null;
  const cursor = state.inbound.cursor;
  sockets.send(ws, buildFrame({ type: 'welcome', payload: welcomePayload(cfg, m.sessionId, cursor, fresh), ack: cursor, reply_to: replyTo }));
  // Everything the operator has not acknowledged (its resume point released the rest), straight
  // from storage (store.ts, sendAfter); nothing can number a frame in between: no await since.
  const replayed = fresh ? 0 : state.store.replay.sendAfter(state.outbound.peerAck, (frame) => sockets.send(ws, frame)).count;
  // After the welcome is out: nothing the operator waits for.
  host.claimed(att.clusterUid, att.routeKey, claim.previousSession);
  state.log.info(fresh ? 'session opened (full resync)' : 'session resumed', {
    reason: freshReason,
    asked: hello.session_id,
    resume_from: hello.resume_from,
    ack_seq: cursor,
    replayed,
    remote_addr: att.remoteAddr,
    generation: m.generation,
    operator_version: hello.operator_version,
  });
  await host.opened(claim.desiredRevision, fresh ? claim.snapshot : null);
}

/**
 * How many deployments a fresh session's claim reads: no more than a page, and few enough that
 * the resync's begin, the page, its stream.end and a marker fit the empty send queue.
 */
export function claimSnapshotRows(cfg: HubConfig): number {
  return Math.max(0, Math.min(cfg.CLAIM_SNAPSHOT_ROWS, cfg.DESIRED_PAGE_ROWS, cfg.SEND_QUEUE_FRAMES - 3));
}
