import { describe, expect, it } from 'vitest';
import { InboundSequencer, MemoryReplayStore, OutboundSequencer, utf8Length } from '../../../src/protocol';

const out = (frames = 100, bytes = 1 << 20) => new OutboundSequencer(new MemoryReplayStore(), { frames, bytes });

describe('outbound sequencing', () => {
  it('each direction numbers its own stream from 1', () => {
    const o = out();
    expect(o.stamp((s) => `f${s}`).seq).toBe(1);
    expect(o.stamp((s) => `f${s}`).seq).toBe(2);
  });

  it('receiving an ack releases everything at or below it from the replay buffer', () => {
    const o = out();
    for (let i = 0; i < 5; i++) o.stamp((s) => `f${s}`);
    expect(o.acknowledge(3)).toBe('advanced');
    expect(o.unacked).toBe(2);
    expect(o.store.entriesAfter(0).map((e) => e.seq)).toEqual([4, 5]);
    expect(o.acknowledge(2)).toBe('stale');
  });

  it('an ack beyond what was sent is invalid', () => {
    const o = out();
    o.stamp((s) => `f${s}`);
    expect(o.acknowledge(2)).toBe('invalid');
  });

  it('a resume re-sends the unreleased frames after resume_from, with their original text', () => {
    const o = out();
    for (let i = 0; i < 5; i++) o.stamp((s) => `frame-${s}`);
    o.acknowledge(1);
    const plan = o.planResume(3);
    expect(plan).toEqual({
      ok: true,
      replay: [
        { seq: 4, frame: 'frame-4', bytes: 7 },
        { seq: 5, frame: 'frame-5', bytes: 7 },
      ],
    });
    expect(o.peerAck).toBe(3);
  });

  it('a requested point that has left the replay buffer cannot be resumed', () => {
    const o = out(3);
    let overflowed = 0;
    for (let i = 0; i < 5; i++) overflowed += o.stamp((s) => `f${s}`).overflowed;
    expect(overflowed).toBe(2);
    expect(o.lostThrough).toBe(2);
    expect(o.planResume(1)).toEqual({ ok: false, reason: 'left_buffer' });
    expect(o.planResume(2).ok).toBe(true);
  });

  it('the replay buffer is bounded in bytes as well as frames', () => {
    const o = out(100, 10);
    o.stamp(() => 'aaaaaa');
    o.stamp(() => 'bbbbbb');
    expect(o.unacked).toBe(1);
    expect(o.lostThrough).toBe(1);
  });

  it('a resume_from ahead of what was sent, or behind what the peer already released, is refused', () => {
    const o = out();
    for (let i = 0; i < 4; i++) o.stamp((s) => `f${s}`);
    expect(o.planResume(5)).toEqual({ ok: false, reason: 'ahead_of_sent' });
    o.acknowledge(3);
    expect(o.planResume(2)).toEqual({ ok: false, reason: 'behind_release' });
  });

  it('a fresh session restarts numbering at 1 and discards the replay buffer', () => {
    const o = out();
    for (let i = 0; i < 4; i++) o.stamp((s) => `f${s}`);
    o.reset();
    expect(o.unacked).toBe(0);
    expect(o.stamp((s) => `f${s}`).seq).toBe(1);
  });

  it('persisted numbers restore the sequencer', () => {
    const store = new MemoryReplayStore();
    const a = new OutboundSequencer(store, { frames: 10, bytes: 1000 });
    a.stamp((s) => `f${s}`);
    a.stamp((s) => `f${s}`);
    a.acknowledge(1);
    const b = new OutboundSequencer(store, { frames: 10, bytes: 1000 }, a.snapshot());
    expect(b.stamp((s) => `f${s}`).seq).toBe(3);
    expect(b.peerAck).toBe(1);
  });

  it('utf8Length counts bytes, not UTF-16 units', () => {
    for (const s of ['', 'abc', 'é', '€', '😀', 'a😀b€', '\ud800x']) {
      expect(utf8Length(s)).toBe(new TextEncoder().encode(s).length);
    }
  });
});

describe('inbound sequencing', () => {
  it('sequenced frames are processed strictly in order: a duplicate is dropped, a gap is reported', () => {
    const i = new InboundSequencer();
    expect(i.arrive(1)).toBe('accept');
    expect(i.arrive(1)).toBe('duplicate');
    expect(i.arrive(3)).toBe('gap');
    expect(i.arrive(2)).toBe('accept');
    expect(i.expected).toBe(3);
  });

  it('the arrival expectation and the applied cursor are two different numbers', () => {
    const i = new InboundSequencer();
    i.arrive(1);
    i.arrive(2);
    expect(i.expected).toBe(3);
    expect(i.cursor).toBe(0);
    i.settle(1, 'applied');
    expect(i.cursor).toBe(1);
  });

  it('reading does not stop at a hole, but the cursor never passes it', () => {
    const i = new InboundSequencer();
    for (let s = 1; s <= 4; s++) i.arrive(s);
    i.settle(1, 'applied');
    i.settle(2, 'failed');
    i.settle(3, 'applied');
    i.settle(4, 'applied');
    expect(i.cursor).toBe(1);
    expect(i.holes).toEqual([2]);
    expect(i.arrive(5)).toBe('accept');
    // The retried frame closes the hole and the cursor catches up with everything settled past it.
    expect(i.settle(2, 'applied')).toBe(true);
    expect(i.cursor).toBe(4);
  });

  it('an undecodable payload (unknown type, poison) still advances the expectation and is acknowledged', () => {
    const i = new InboundSequencer();
    i.arrive(1);
    i.settle(1, 'dropped');
    expect(i.cursor).toBe(1);
    expect(i.arrive(2)).toBe('accept');
  });

  it('on resume the arrival expectation rewinds to cursor + 1, so the replay is not read as duplicates', () => {
    const i = new InboundSequencer();
    for (let s = 1; s <= 5; s++) i.arrive(s);
    i.settle(1, 'applied');
    i.settle(2, 'failed');
    i.settle(3, 'applied');
    i.rewind();
    expect(i.expected).toBe(2);
    expect(i.arrive(2)).toBe('accept');
  });

  it('settlements from before a rewind or outside the window are ignored', () => {
    const i = new InboundSequencer(10);
    expect(i.settle(10, 'applied')).toBe(false);
    expect(i.settle(11, 'applied')).toBe(false);
    i.arrive(11);
    expect(i.settle(11, 'applied')).toBe(true);
  });
});
