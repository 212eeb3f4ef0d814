/**
 * What a starting operator can claim about its own past, decided from what survived: the
 * durable record and (if it has one) the durable outbound log. Pure.
 *
 * - No session: nothing to resume; not lossy (there is nothing to be a base for).
 * - A durable log that is intact and belongs to the recorded session: resumable, whatever way
 *   the process ended. The log is the authority on numbering (every frame the hub can have seen
 *   is in it; numbers past its last commit never reached the socket), and the record's peer ack,
 *   a real ack from the hub within the session, releases what the log had not compacted yet.
 * - A durable log that cannot vouch for itself (corrupt, another session, missing): lossy.
 * - In-memory buffer: resumable only after a clean stop that left nothing unacknowledged.
 *
 * A process that continues a recorded session (whatever way the last one ended) streams an
 * observed resync once the session opens. After an unclean end, observations queued but never
 * numbered died with the process; after a clean one too, the last process can have applied
 * something it never reported (a desired delete that landed while its informers were stopping,
 * acknowledged in the drain), and whatever changed while no process ran is invisible to a re-list,
 * which reports only what exists. Only a snapshot, which the hub prunes against, says what is gone.
 *
 * Whatever the buffer says, a process that stopped while a hub snapshot was open (its
 * `resync.begin` applied, its `stream.end` not) is lossy: the half it saw is gone from memory and
 * can never be pruned against, and a resume would replay only its tail. A fresh session brings a
 * whole one.
 */
import type { OutboundState } from '../protocol';
import type { DurableRecord } from './cursor-store';
import type { LogRecovery } from './outbound-log';

export interface ResumeBase {
  lossy: boolean;
  /** Numbering to continue with (meaningless when lossy: the hub will grant a fresh session). */
  outbound: OutboundState;
  /** Whether the surviving buffer contents are usable (false: clear the buffer). */
  keepBuffer: boolean;
  resyncAfterOpen: boolean;
  /** Why the log could not vouch, for the log line. */
  problem: string | null;
  /** Lossy because the process stopped in the middle of a hub snapshot. */
  snapshotInterrupted: boolean;
}

export function decideResumeBase(record: DurableRecord, buffer: { durable: boolean; recovery: LogRecovery }): ResumeBase {
  const base = fromBuffer(record, buffer);
  if (record.hubSnapshotOpen === true && record.sessionId !== null) return { ...base, lossy: true, snapshotInterrupted: true };
  return { ...base, snapshotInterrupted: false };
}

function fromBuffer(record: DurableRecord, buffer: { durable: boolean; recovery: LogRecovery }): Omit<ResumeBase, 'snapshotInterrupted'> {
  const resyncAfterOpen = record.sessionId !== null;
  if (record.sessionId === null) {
    return { lossy: false, outbound: record.outbound, keepBuffer: false, resyncAfterOpen, problem: null };
  }
  const r = buffer.recovery;
  const readable = buffer.durable && r.intact && r.session === record.sessionId;
  // A verdict reached at runtime: the log, rewritten whole at the stop, would otherwise vouch for
  // the very frames the hub refused. A readable log is still kept, to be read, never resumed from
  // (hello says lossy): the fresh session then counts its unacknowledged events as lost and sends
  // its removals again, as it does when the verdict and the fresh welcome fall in one process.
  if (record.lossy === true) {
    const problem = 'an earlier process found the session could not be resumed';
    return readable ? { ...fromReadableLog(record, r), lossy: true, problem } : { lossy: true, outbound: record.outbound, keepBuffer: false, resyncAfterOpen, problem };
  }
  if (buffer.durable) {
    if (readable) return fromReadableLog(record, r);
    return {
      lossy: true,
      outbound: record.outbound,
      keepBuffer: false,
      resyncAfterOpen,
      problem: r.problem ?? (r.session !== record.sessionId ? 'the outbound log belongs to another session' : 'unknown'),
    };
  }
  const resumable = record.clean && record.outbound.peerAck === record.outbound.nextSeq - 1;
  return {
    lossy: !resumable,
    outbound: record.outbound,
    keepBuffer: false,
    resyncAfterOpen,
    problem: resumable ? null : 'the in-memory replay buffer did not survive with unacknowledged frames in it',
  };
}

/** Resuming from an intact durable log of the record's session: numbering continues from the log. */
function fromReadableLog(record: DurableRecord, r: LogRecovery): Omit<ResumeBase, 'snapshotInterrupted'> {
  const lastSent = Math.max(r.lastSeq, r.released);
  const peerAck = Math.max(r.released, Math.min(record.outbound.peerAck, lastSent));
  return {
    lossy: false,
    outbound: { nextSeq: lastSent + 1, peerAck, lostThrough: r.lostThrough },
    keepBuffer: true,
    resyncAfterOpen: record.sessionId !== null,
    problem: r.problem,
  };
}
