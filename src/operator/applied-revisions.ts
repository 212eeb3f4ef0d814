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
 */
export interface AppliedEntry {
  deploymentId: string;
  revision: number;
  /** The seq of the frame that applied it. */
  seq: number;
}

export class AppliedRevisions {
  private readonly revisions = new Map<string, number>();
  /** Applied since the last save, by deployment: pruned to those past the cursor at each save. */
  private readonly recent = new Map<string, AppliedEntry>();
  /**
   * Told when a revision is applied behind a hole: no cursor move will save the record for it, so
   * the client saves it now, before a crash could forget what the cluster already renders.
   */
  pastHole: (() => void) | null = null;

  constructor(private readonly cursor: () => number) {}

  get(deploymentId: string): number | undefined {
    return this.revisions.get(deploymentId);
  }

  applied(deploymentId: string, revision: number, seq: number): void {
    this.revisions.set(deploymentId, revision);
    this.recent.set(deploymentId, { deploymentId, revision, seq });
    if (seq > this.cursor() + 1) this.pastHole?.();
  }

  /** A complete hub snapshot withdrew every deployment not in `keep`. */
  keepOnly(keep: ReadonlySet<string>): void {
    for (const id of [...this.revisions.keys()]) if (!keep.has(id)) this.revisions.delete(id);
    for (const id of [...this.recent.keys()]) if (!keep.has(id)) this.recent.delete(id);
  }

  /** What a replay from `cursor + 1` could deliver again: for the durable record. */
  pastCursor(cursor: number): AppliedEntry[] {
    const out: AppliedEntry[] = [];
    for (const [id, e] of this.recent) {
      if (e.seq <= cursor) this.recent.delete(id);
      else out.push(e);
    }
    return out;
  }

  /** Taken up from the durable record of the session this process continues. */
  restore(entries: readonly AppliedEntry[]): void {
    this.clear();
    for (const e of entries) {
      this.revisions.set(e.deploymentId, e.revision);
      this.recent.set(e.deploymentId, { ...e });
    }
  }

  clear(): void {
    this.revisions.clear();
    this.recent.clear();
  }
}
