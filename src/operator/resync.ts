/**
 * Both halves of full resync.
 *
 * Outbound (`ObservedResync`): the operator's snapshot of its observed state, framed as
 * `resync.begin {scope}` → one `.observed` frame per object with `reply_to` = the begin's id →
 * `stream.end {complete, count}` with the same `reply_to`. The snapshot is taken once, when the
 * resync starts, so the stream is a consistent picture; the end frame is built last, so its
 * count is what was actually written and `complete` is false if any object could not be sent.
 *
 * Inbound (`InboundResyncs`): the hub's desired snapshot. Pruning is allowed only after a
 * `stream.end {complete: true}` whose count matches the frames this side saw carrying the
 * begin's id, and none of which was unreadable.
 */
import { ResyncBeginPayload, type Payload, type ResyncKind } from '../protocol';
import { checkedPayload, outItem, queueing, type OutItem } from './outgoing';

/** The operator's complete observed state, as the application sees it now. */
export interface ObservedSnapshot {
  /** Omit (or null) to leave the `cluster` kind out of the snapshot's scope. */
  cluster?: Payload<'cluster.observed'> | null;
  nodes: Payload<'node.observed'>[];
  devices: Payload<'device.observed'>[];
  deployments: Payload<'deployment.observed'>[];
}

export class ObservedResync {
  readonly beginId: string;
  readonly scope: ResyncKind[];
  private readonly body: OutItem[];
  private began = false;
  private index = 0;
  private ended = false;
  private written = 0;
  /** Objects that could not be framed or written: the stream cannot claim to be complete. */
  private missing: string[];

  constructor(snapshot: ObservedSnapshot, newId: () => string) {
    this.beginId = newId();
    const missing: string[] = [];
    const body: OutItem[] = [];
    const add = <T extends 'cluster.observed' | 'node.observed' | 'device.observed' | 'deployment.observed'>(
      type: T,
      payload: unknown,
    ) => {
      try {
        body.push(outItem(type, checkedPayload(type, payload), this.beginId));
      } catch (err) {
        missing.push(err instanceof Error ? err.message : String(err));
      }
    };
    const scope: ResyncKind[] = [];
    if (snapshot.cluster) {
      scope.push('cluster');
      add('cluster.observed', snapshot.cluster);
    }
    scope.push('node', 'device', 'deployment');
    for (const n of snapshot.nodes) add('node.observed', n);
    for (const d of snapshot.devices) add('device.observed', d);
    for (const d of snapshot.deployments) add('deployment.observed', d);
    this.scope = scope;
    this.body = body;
    this.missing = missing;
  }

  /** The coalescing keys of the objects it carries (`node/<id>`, …). */
  memberKeys(): Set<string> {
    const keys = new Set<string>();
    for (const item of this.body) {
      const key = queueing(item).key;
      if (key !== null) keys.add(key);
    }
    return keys;
  }

  /** Problems found so far (objects left out); non-empty means `complete: false`. */
  get problems(): readonly string[] {
    return this.missing;
  }

  get done(): boolean {
    return this.ended;
  }

  /** The next frame of the stream, or null once `stream.end` has been handed out. */
  next(): OutItem | null {
    if (!this.began) {
      this.began = true;
      return outItem('resync.begin', ResyncBeginPayload.parse({ scope: this.scope }), null, { id: this.beginId });
    }
    const item = this.body[this.index];
    if (item) {
      this.index++;
      return item;
    }
    if (this.ended) return null;
    this.ended = true;
    return outItem('stream.end', { complete: this.missing.length === 0, count: this.written }, this.beginId);
  }

  /** The writer reports each body frame it wrote… */
  wrote(item: OutItem): void {
    if (item.replyTo === this.beginId && item.type !== 'stream.end') this.written++;
  }

  /** …and each it could not (too big for the hub's frame limit). */
  skipped(item: OutItem, reason: string): void {
    if (item.replyTo === this.beginId) this.missing.push(`${item.type}: ${reason}`);
  }
}

interface OpenStream {
  scope: readonly ResyncKind[];
  /** The begin's own seq: only frames numbered after it follow the snapshot. */
  beginSeq: number;
  /** Distinct seqs seen carrying the begin's id: a replay after a reconnect is not counted twice. */
  seqs: Set<number>;
  deploymentIds: Set<string>;
  /**
   * Deployments the hub sent after the begin other than as members (the changes that follow a
   * snapshot, another stream's members). Not counted; kept by the prune all the same: a prune
   * retried after a transient failure runs after them, and the hub does not send them again.
   */
  laterDeploymentIds: Set<string>;
  /** Distinct seqs that could not be read (a frame withheld for room is dispatched again). */
  unreadable: Set<number>;
}

export type StreamVerdict =
  | { prune: true; scope: readonly ResyncKind[]; keepDeployments: ReadonlySet<string>; beginSeq: number }
  | { prune: false; reason: string };

/** The hub's resync streams currently open, matched on the begin's id and nothing else. */
export class InboundResyncs {
  private readonly open = new Map<string, OpenStream>();

  constructor(private readonly maxOpen = 16) {}

  get size(): number {
    return this.open.size;
  }

  /**
   * Whether an open stream is a snapshot of deployments, the only kind this side prunes: one of
   * kinds it does not know (a newer hub's) prunes nothing, and a restart during it loses nothing.
   */
  prunesOpen(): boolean {
    for (const s of this.open.values()) if (s.scope.includes('deployment')) return true;
    return false;
  }

  begin(beginId: string, scope: readonly ResyncKind[], beginSeq = 0): void {
    if (this.open.size >= this.maxOpen && !this.open.has(beginId)) {
      // A peer that never ends its streams must not grow this map without bound.
      const oldest = this.open.keys().next().value;
      if (oldest !== undefined) this.open.delete(oldest);
    }
    if (!this.open.has(beginId)) this.open.set(beginId, { scope, beginSeq, seqs: new Set(), deploymentIds: new Set(), laterDeploymentIds: new Set(), unreadable: new Set() });
  }

  /** Whether `replyTo` names an open stream (the frame then belongs to its snapshot). */
  has(replyTo: string | null): replyTo is string {
    return replyTo !== null && this.open.has(replyTo);
  }

  /** Count a frame carried by a stream; `deploymentId` when it is a readable deployment.desired. */
  carry(replyTo: string, seq: number, deploymentId: string | null): void {
    const s = this.open.get(replyTo);
    if (!s) return;
    s.seqs.add(seq);
    if (deploymentId !== null) s.deploymentIds.add(deploymentId);
  }

  /**
   * A deployment.desired numbered `seq` was dispatched, as a member of stream `replyTo` or of
   * none: no other open stream begun before it may prune it away. One numbered before a begin (a
   * retry of a frame that failed before the snapshot opened) is older than the snapshot, which
   * says what holds: it keeps nothing.
   */
  mentioned(replyTo: string | null, deploymentId: string, seq: number): void {
    for (const [beginId, s] of this.open) if (beginId !== replyTo && seq > s.beginSeq) s.laterDeploymentIds.add(deploymentId);
  }

  /** A frame in the stream could not be read: the snapshot cannot be pruned against. */
  unreadable(replyTo: string, seq: number): void {
    const s = this.open.get(replyTo);
    if (!s) return;
    s.seqs.add(seq);
    s.unreadable.add(seq);
  }

  /** Judge the stream at its `stream.end`. The stream stays open until `close()`. */
  judge(replyTo: string | null, end: Payload<'stream.end'>): StreamVerdict {
    const s = replyTo === null ? undefined : this.open.get(replyTo);
    if (!s) return { prune: false, reason: 'stream.end for a stream this side did not see open' };
    if (!end.complete) return { prune: false, reason: 'the sender marked the snapshot incomplete' };
    if (end.count !== s.seqs.size) return { prune: false, reason: `count ${end.count} but ${s.seqs.size} frames seen` };
    if (s.unreadable.size > 0) return { prune: false, reason: `${s.unreadable.size} unreadable frame(s) in the snapshot` };
    if (s.laterDeploymentIds.size === 0) return { prune: true, scope: s.scope, keepDeployments: s.deploymentIds, beginSeq: s.beginSeq };
    return { prune: true, scope: s.scope, keepDeployments: new Set([...s.deploymentIds, ...s.laterDeploymentIds]), beginSeq: s.beginSeq };
  }

  close(replyTo: string | null): void {
    if (replyTo !== null) this.open.delete(replyTo);
  }

  clear(): void {
    this.open.clear();
  }
}
