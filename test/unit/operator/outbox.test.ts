import { describe, expect, it } from 'vitest';
import { handlersNormalizeCases } from './support/cases';
import { normalizeResult } from '../../../src/operator/handlers';
import { LinkStatsReporter } from '../../../src/operator/link-stats';
import { outItem } from '../../../src/operator/outgoing';
import { Outbox } from '../../../src/operator/outbox';
import { ObservedResync } from '../../../src/operator/resync';
import { newId } from '../../../src/protocol';
import { SNAPSHOT } from './support/harness';

const nodeItem = (id: string, ready = true) => outItem('node.observed', { ...SNAPSHOT.nodes[0]!, node_id: id, ready });
const eventItem = (n: number) => outItem('node.event', { subject: 'node-a', reason: 'Flap', message: `${n}`, severity: 'info', occurred_at: '2026-01-01T00:00:00Z' });

describe('outbox', () => {
  it('coalesces state by subject under pressure and counts what it replaced, dropped and evicted', () => {
    const box = new Outbox(3);
    box.push(nodeItem('a'));
    box.push(nodeItem('b'));
    box.push(eventItem(1));
    expect(box.push(nodeItem('a', false))).toBe('replaced');
    expect(box.push(eventItem(2))).toBe('dropped_event');
    expect(box.push(nodeItem('c'))).toBe('evicted_oldest');
    expect(box.counters).toEqual({ replacedFrames: 1, droppedEvents: 1, evictedFrames: 1 });
    const out = [box.next(), box.next(), box.next(), box.next()].map((i) =>
      i === null ? null : i.type === 'node.observed' ? (i.payload as { node_id: string }).node_id : i.type,
    );
    // a (already superseded by a') was the oldest evictable frame when c arrived.
    expect(out).toEqual(['b', 'node.event', 'c', null]);
  });

  it('never reorders or replaces a control frame: what the queue itself refuses waits in order', () => {
    const box = new Outbox(1, 64);
    const ctl = Array.from({ length: 40 }, (_, i) => outItem('operation.accepted', { operation_id: newId() }, `${i}`));
    for (const c of ctl) expect(box.push(c)).toBe('appended');
    const out = [];
    for (let i = box.next(); i; i = box.next()) out.push(i.replyTo);
    expect(out).toEqual(ctl.map((c) => c.replyTo));
  });

  it('holds at most controlLimit control frames: a push past it is refused, and the last slots are kept for replies', () => {
    const box = new Outbox(4, 10);
    const ctl = (i: number) => outItem('operation.progress', { operation_id: newId(), phase: 'p', message: `${i}` }, newId());
    const outcomes = Array.from({ length: 50 }, (_, i) => box.push(ctl(i)));
    expect(outcomes.filter((o) => o === 'appended')).toHaveLength(10);
    expect(outcomes.slice(10).every((o) => o === 'rejected')).toBe(true);
    expect(box.length).toBe(10);
    expect(box.controlWaiting).toBe(10);
    expect([box.hasRoom(), box.hasRoom(true)]).toEqual([false, false]);
    box.next();
    // One slot free: a reply may take it, another report may not (REPLY_RESERVE = 2).
    expect([box.hasRoom(), box.hasRoom(true)]).toEqual([false, true]);
    box.next();
    box.next();
    expect([box.hasRoom(), box.hasRoom(true)]).toEqual([true, true]);
    // State and events keep the queue's own bound beside the control frames.
    for (let i = 0; i < 100; i++) box.push(nodeItem(`n${i}`));
    for (let i = 0; i < 100; i++) box.push(eventItem(i));
    expect(box.length).toBeLessThanOrEqual(4 + 10);
    // A frame put back by the writer is still counted against the bound until it is written.
    const taken = box.next()!;
    const before = box.controlWaiting;
    box.putBack(taken);
    expect(box.controlWaiting).toBe(before + (taken.type === 'operation.progress' ? 1 : 0));
  });

  it('writes a resync stream whole before the queue, and a taken frame can be put back first', () => {
    const box = new Outbox(8);
    box.push(eventItem(1));
    const stream = new ObservedResync(SNAPSHOT, newId);
    box.startResync(stream);
    const first = box.next()!;
    expect(first.type).toBe('resync.begin');
    box.putBack(first);
    expect(box.next()).toBe(first);
    const types = [];
    for (let i = box.next(); i; i = box.next()) types.push(i.type);
    expect(types).toEqual(['cluster.observed', 'node.observed', 'device.observed', 'stream.end', 'node.event']);
    expect(box.empty).toBe(true);
  });

  it('a state frame queued before the snapshot was asked for, and older than it, does not follow the stream: only a removal of a subject the snapshot leaves out does', () => {
    const box = new Outbox(16);
    // Queued before the snapshot: an update of a node the snapshot lists (older than it), an update
    // of a node it leaves out (gone since: sent after the stream, it would bring the node back after
    // the prune), removals of a node it lists (back since) and of one it leaves out.
    box.push(nodeItem('node-a', false));
    box.push(nodeItem('node-gone'));
    box.push(outItem('node.removed', { node_id: 'node-a' }));
    box.push(outItem('node.removed', { node_id: 'node-x' }));
    box.push(eventItem(1));
    box.holdReports();
    // Reported while the snapshot is being taken: may be newer than it, so it follows it.
    box.push(nodeItem('node-b'));
    box.startResync(new ObservedResync(SNAPSHOT, newId));
    box.releaseReports();
    const out: string[] = [];
    for (let i = box.next(); i; i = box.next()) out.push(`${i.type}${'node_id' in (i.payload as object) && i.replyTo === null ? ` ${(i.payload as { node_id: string }).node_id}` : ''}`);
    expect(out).toEqual(['resync.begin', 'cluster.observed', 'node.observed', 'device.observed', 'stream.end', 'node.removed node-x', 'node.event', 'node.observed node-b']);
    expect(box.counters.replacedFrames).toBe(3);
  });

  it('a removal the full queue evicted follows the next snapshot that leaves its subject out, unless a newer report of it came; one evicted while that snapshot was taken waits for the one after', () => {
    const box = new Outbox(4);
    let n = 0;
    /** Push a removal of `id`, then as many other reports as the queue holds: the removal is evicted. */
    const evict = (id: string) => {
      box.push(outItem('node.removed', { node_id: id }));
      for (let i = 0; i < 4; i++) box.push(nodeItem(`filler-${n++}`));
    };
    const removalsOut = () => {
      const out: string[] = [];
      for (let i = box.next(); i; i = box.next()) if (i.type === 'node.removed') out.push((i.payload as { node_id: string }).node_id);
      return out;
    };
    // Evicted before the snapshot: node-x (gone), node-a (the snapshot lists it), node-y (reported again since).
    for (const id of ['node-x', 'node-a', 'node-y']) {
      evict(id);
      expect(removalsOut()).toEqual([]);
    }
    box.push(nodeItem('node-y'));
    box.holdReports();
    // Evicted while the snapshot is taken: newer than it.
    evict('node-z');
    box.startResync(new ObservedResync(SNAPSHOT, newId));
    box.releaseReports();
    expect(removalsOut()).toEqual(['node-x']);
    box.startResync(new ObservedResync(SNAPSHOT, newId));
    expect(removalsOut()).toEqual(['node-z']);
    box.startResync(new ObservedResync(SNAPSHOT, newId));
    expect(removalsOut()).toEqual([]);
  });

  it('link.stats waits in a slot of its own: a newer report takes the older one\'s place without being counted, and never evicts a report of the application', () => {
    const box = new Outbox(2, 3);
    box.push(nodeItem('n1'));
    box.push(nodeItem('n2'));
    const stats = (n: number) => outItem('link.stats', { epoch: 'e', dropped_events: n, evicted_frames: 0, replaced_frames: 0, handler_failures: 0 });
    for (let i = 0; i < 5; i++) box.push(stats(i));
    expect(box.counters).toEqual({ droppedEvents: 0, evictedFrames: 0, replacedFrames: 0 });
    const out = [];
    for (let i = box.next(); i; i = box.next()) out.push(i.type === 'link.stats' ? `stats ${(i.payload as { dropped_events: number }).dropped_events}` : i.type);
    expect(out).toEqual(['stats 4', 'node.observed', 'node.observed']);
  });

  it("a fresh session drops a finished stream's end still waiting for the window, though a later stream replaced it meanwhile", () => {
    const box = new Outbox(8);
    const first = new ObservedResync(SNAPSHOT, newId);
    box.startResync(first);
    let end = box.next();
    while (end && end.type !== 'stream.end') end = box.next();
    // The window has no room for the end: it waits, and the stream counts as finished.
    box.putBack(end!);
    expect(box.resyncInProgress).toBeNull();
    // A periodic reconciliation starts the next stream; then the hub grants a fresh session.
    box.startResync(new ObservedResync(SNAPSHOT, newId));
    box.dropResync();
    // Before, the first stream's end came out first, to be numbered in the new session.
    expect(box.next()).toBeNull();
  });
});

describe('link.stats cadence', () => {
  it('is due at once after a session opens, then only when counters change, at most once per interval', () => {
    const r = new LinkStatsReporter(newId(), 5_000);
    const zero = { droppedEvents: 0, evictedFrames: 0, replacedFrames: 0, handlerFailures: 0, droppedProgress: 0 };
    expect(r.dueIn(zero, 1_000)).toBe(0);
    expect(r.take(zero, 1_000)).toMatchObject({ dropped_events: 0, evicted_frames: 0, replaced_frames: 0 });
    expect(r.dueIn(zero, 2_000)).toBeNull();
    const one = { ...zero, droppedEvents: 1 };
    expect(r.dueIn(one, 2_000)).toBe(4_000);
    expect(r.dueIn(one, 7_000)).toBe(0);
    r.take(one, 7_000);
    // A dropped progress report is a change too, and is reported.
    const dropped = { ...one, droppedProgress: 2 };
    expect(r.dueIn(dropped, 12_000)).toBe(0);
    expect(r.take(dropped, 12_000)).toMatchObject({ dropped_progress: 2, handler_failures: 0 });
    r.sessionOpened();
    expect(r.dueIn(one, 7_001)).toBe(0);
  });
});

describe('handler outcomes', () => {
  it.each(handlersNormalizeCases)('%s', (_name, value, expected) => {
    expect(normalizeResult(value)).toMatchObject(expected);
  });
});
