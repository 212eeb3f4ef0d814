/**
 * The highest `deployment.desired.revision` applied per deployment in this session, so that a
 * replay or an overtaken retry never renders a deployment backwards.
 *
 * A frame applied past a hole (an earlier frame's handler failed) stays past the cursor, and the
 * hub replays it, and the older frames around it, after a resume: the next process too, when it
 * continues the session from the durable record. So the entries applied past the cursor are kept
 * in that record (`pastCursor`); those at or below it can never be delivered again in this session
 * and stay in memory only. In the steady state nothing is past the cursor at a save, and the
 * record carries nothing.
 *
 * The next process replays from the cursor last saved, which trails the one in memory until the
 * ack's save (and, while the link is down, the whole backoff): a revision applied over an older
 * one of the same deployment still above the saved cursor must be saved at once as well, hole or
 * not, or a crash lets the replay render the older one over it.
 *
 * A withdrawal's entry is forgotten once the saved cursor has passed the frame that withdrew (at
 * the next save): the hub numbers a deployment's revisions in the order it made them (one row per
 * deployment, a cluster-wide revision, tombstones kept), so only a frame numbered below the
 * withdrawal could carry an older revision, and none at or below the saved cursor is applied again
 * in this session, by this process (the sequencer drops it as a duplicate) or the next (it resumes
 * from that cursor). A restart forgets every entry at or below it in the same way. Without this, a
 * session that lives for months with a short-lived deployment per CI run would remember each one;
 * live deployments are bounded by the cluster's desired state.
 */
export interface AppliedEntry {
  deploymentId: string;
  revision: number;
  /** The seq of the frame that applied it. */
  seq: number;
  /** It withdrew the deployment (`deleted`): forgotten once the saved cursor passes `seq`. */
  withdrawn?: boolean;
}

export class AppliedRevisions {
  /** The highest revision applied per deployment, and the seq of the frame that applied it. */
  private readonly revisions = new Map<string, { revision: number; seq: number }>();
  /** Applied since the last save, by deployment: pruned to those past the cursor at each save. */
  private readonly recent = new Map<string, AppliedEntry>();
  /** Withdrawals still remembered, by deployment: the seq of the frame that withdrew it. */
  private readonly withdrawals = new Map<string, number>();
  /**
   * The latest complete hub snapshot's prune: the seq of its begin and what it kept. A frame
   * numbered below that begin, of a deployment it did not keep, is older than the snapshot, which
   * said the deployment is gone. One that failed before the begin and is retried after the prune
   * (reading does not stop at a hole) would otherwise render it again: the prune dropped the entry
   * that would have shown it behind, or there was none (the application had it from before).
   * Forgotten once the saved cursor reaches the begin: no frame before it is applied again.
   */
  private lastPrune: { beginSeq: number; keep: ReadonlySet<string> } | null = null;
  /**
   * Told when a revision is applied that a replay from the saved cursor could undo: behind a hole
   * (no cursor move will save the record for it), or over an older revision of its deployment
   * applied above the saved cursor. The client saves it now, before a crash could forget what the
   * cluster already renders.
   */
  mustSave: (() => void) | null = null;
  /** The cursor in the last completed save of the durable record: where a replay would start. */
  savedCursor: () => number = () => 0;

  constructor(private readonly cursor: () => number) {}

  get(deploymentId: string): number | undefined {
    return this.revisions.get(deploymentId)?.revision;
  }

  applied(deploymentId: string, revision: number, seq: number, withdrawn = false): void {
    const before = this.revisions.get(deploymentId);
    this.revisions.set(deploymentId, { revision, seq });
    this.recent.set(deploymentId, { deploymentId, revision, seq, ...(withdrawn ? { withdrawn } : {}) });
    if (withdrawn) this.withdrawals.set(deploymentId, seq);
    else this.withdrawals.delete(deploymentId);
    if (seq > this.cursor() + 1 || (before !== undefined && before.seq > this.savedCursor())) this.mustSave?.();
  }

  /**
   * Deployments applied from frames numbered after `seq` in this session: newer than a snapshot
   * begun at `seq`, whatever the snapshot lists.
   */
  appliedAfter(seq: number): string[] {
    const out: string[] = [];
    for (const [id, e] of this.revisions) if (e.seq > seq) out.push(id);
    return out;
  }

  /** A complete hub snapshot begun at `beginSeq` withdrew every deployment not in `keep`. */
  keepOnly(keep: ReadonlySet<string>, beginSeq: number): void {
    for (const id of [...this.revisions.keys()]) if (!keep.has(id)) this.revisions.delete(id);
    for (const id of [...this.recent.keys()]) if (!keep.has(id)) this.recent.delete(id);
    for (const id of [...this.withdrawals.keys()]) if (!keep.has(id)) this.withdrawals.delete(id);
    if (beginSeq > this.savedCursor() + 1 && beginSeq > (this.lastPrune?.beginSeq ?? 0)) this.lastPrune = { beginSeq, keep };
  }

  /** The latest snapshot, begun after frame `seq`, withdrew this deployment: the frame is older than what holds. */
  prunedAfter(deploymentId: string, seq: number): boolean {
    const p = this.lastPrune;
    return p !== null && seq < p.beginSeq && !p.keep.has(deploymentId);
  }

  /** What a replay from `cursor + 1` could deliver again: for the durable record. */
  pastCursor(cursor: number): AppliedEntry[] {
    this.forgetSavedWithdrawals();
    const out: AppliedEntry[] = [];
    for (const [id, e] of this.recent) {
      if (e.seq <= cursor) this.recent.delete(id);
      else out.push(e);
    }
    return out;
  }

  /**
   * Withdrawals the saved cursor has passed: no frame that could undo them is applied again (see
   * above). Run at each save, so a withdrawal is forgotten at the save after the one that passed it.
   */
  private forgetSavedWithdrawals(): void {
    const saved = this.savedCursor();
    for (const [id, seq] of this.withdrawals) {
      if (seq > saved) continue;
      this.withdrawals.delete(id);
      this.revisions.delete(id);
    }
    if (this.lastPrune !== null && this.lastPrune.beginSeq <= saved + 1) this.lastPrune = null;
  }

  /** Taken up from the durable record of the session this process continues. */
  restore(entries: readonly AppliedEntry[]): void {
    this.clear();
    for (const e of entries) {
      this.revisions.set(e.deploymentId, { revision: e.revision, seq: e.seq });
      this.recent.set(e.deploymentId, { ...e });
      if (e.withdrawn === true) this.withdrawals.set(e.deploymentId, e.seq);
    }
  }

  clear(): void {
    this.revisions.clear();
    this.recent.clear();
    this.withdrawals.clear();
    this.lastPrune = null;
  }
}
