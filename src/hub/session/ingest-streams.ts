/**
 * The operator's resync streams as the ingest batches see them: which stream a frame belongs to,
 * each member counted once (a replay is not counted again), and what leaves a stream unprunable
 * that only the statement can tell.
 */
import { resyncKindOf } from '../../protocol';
import type { BuiltBatch, InboundItem } from './ingest-batch';
import type { OpResync } from './store';

/**
 * The open stream a frame's reply_to names. An own key only: reply_to is the operator's text
 * (a poison frame's may be anything), and `__proto__` or `constructor` must not find the
 * prototype's members and write a count onto them, isolate-wide.
 */
export function openStream(resyncs: Record<string, OpResync>, replyTo: string | null): OpResync | undefined {
  return replyTo !== null && Object.hasOwn(resyncs, replyTo) ? resyncs[replyTo] : undefined;
}

/** Whether a frame of `type` could describe a kind `stream` prunes (its type's prefix is one). */
export function describesPruned(stream: OpResync, type: string): boolean {
  const kind = resyncKindOf(type);
  return kind !== null && stream.scope.includes(kind);
}

/** Operator resync streams open at once in one session (a resync has at most one per kind). */
export const MAX_OPEN_RESYNCS = 16;

/** Note `seq` as counted in the stream; false when it already was (a replayed member). */
export function countOnce(stream: OpResync, seq: number): boolean {
  const r = stream.counted;
  if (!r) return true;
  return countOnceIn(r, seq);
}

/**
 * Note `seq` in sorted, disjoint, inclusive ranges; false when it was there already. The ranges
 * stay few: seqs arrive in runs (a stream's members interleaved only with frames outside it, a
 * session's frames in order but for a replay), and a seq past the last range costs one compare.
 */
export function countOnceIn(r: [number, number][], seq: number): boolean {
  let i = r.length;
  while (i > 0 && (r[i - 1] as [number, number])[0] > seq) i--;
  const prev = r[i - 1];
  if (prev && seq <= prev[1]) return false;
  const next = r[i];
  const joinsPrev = prev !== undefined && prev[1] === seq - 1;
  const joinsNext = next !== undefined && next[0] === seq + 1;
  if (joinsPrev && joinsNext) {
    prev[1] = next[1];
    r.splice(i, 1);
  } else if (joinsPrev) prev[1] = seq;
  else if (joinsNext) next[0] = seq;
  else r.splice(i, 0, [seq, seq]);
  return true;
}

/** Whether `seq` lies in sorted, disjoint, inclusive ranges (as `countOnceIn` keeps them). */
export function inRanges(r: readonly [number, number][] | undefined, seq: number): boolean {
  if (!r) return false;
  for (let i = r.length - 1; i >= 0; i--) {
    const [first, last] = r[i] as [number, number];
    if (seq > last) return false;
    if (seq >= first) return true;
  }
  return false;
}

/**
 * Forget counted seqs at or below the contiguous cursor: the operator never sends them again
 * (a resume replays from the cursor, and the sequencer drops anything below it), so only the
 * members applied past a hole need remembering.
 */
export function forgetCountedThrough(resyncs: Record<string, OpResync>, cursor: number): void {
  for (const stream of Object.values(resyncs)) {
    if (stream.counted && stream.counted.length > 0) stream.counted = stream.counted.filter(([, last]) => last > cursor);
  }
}

/**
 * Where a run must end early: before a stream.end whose stream carried an operation frame earlier
 * in the same run. Such a frame is found to be a rejection (it names an operation this cluster does
 * not have) only by the statement, and a snapshot with a rejected frame inside it must not be
 * pruned against: ended before the stream.end, the commit marks the stream (`markRejectedMembers`)
 * before its end is read. Null when the run may go whole.
 */
export function cutBeforeUncertainEnd(run: readonly InboundItem[]): number | null {
  let opStreams: Set<string> | null = null;
  for (let i = 0; i < run.length; i++) {
    const item = run[i] as InboundItem;
    if (item.replyTo === null) continue;
    if (item.type === 'stream.end') {
      if (i > 0 && opStreams?.has(item.replyTo)) return i;
    } else if (item.kind === 'message' && item.type.startsWith('operation.')) {
      (opStreams ??= new Set()).add(item.replyTo);
    }
  }
  return null;
}

/**
 * A committed batch's operation frames the statement rejected (an operation this cluster does not
 * have): each one inside a resync stream leaves that stream tainted, as a poison member does.
 */
export function markRejectedMembers(items: readonly InboundItem[], built: BuiltBatch, unknownOperations: readonly { seq: number }[]): void {
  if (unknownOperations.length === 0) return;
  const rejected = new Set(unknownOperations.map((u) => u.seq));
  for (const item of items) {
    if (!rejected.has(item.seq)) continue;
    const stream = openStream(built.resyncs, item.replyTo);
    if (stream) stream.tainted = true;
  }
}
