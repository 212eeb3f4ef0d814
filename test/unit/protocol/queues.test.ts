import { describe, expect, it } from 'vitest';
import { HubSendQueue, OperatorSendQueue, type Queued } from '../../../src/protocol';

const state = (key: string, v: string): Queued<string> => ({ value: v, class: 'state', key });
const event = (v: string): Queued<string> => ({ value: v, class: 'event', key: null });
const control = (v: string): Queued<string> => ({ value: v, class: 'control', key: null });
const drain = (q: OperatorSendQueue<string>) => [...q.values()];

describe('operator send queue', () => {
  it('appends while there is room, even for a key already queued', () => {
    const q = new OperatorSendQueue<string>(3);
    expect(q.push(state('node/a', 'a1'))).toBe('appended');
    expect(q.push(state('node/a', 'a2'))).toBe('appended');
    expect(drain(q)).toEqual(['a1', 'a2']);
  });

  it('when full, the oldest frame of the same type and subject is replaced, not appended', () => {
    const q = new OperatorSendQueue<string>(3);
    q.push(state('node/a', 'a1'));
    q.push(state('node/b', 'b1'));
    q.push(state('node/c', 'c1'));
    expect(q.push(state('node/b', 'b2'))).toBe('replaced');
    expect(drain(q)).toEqual(['a1', 'b2', 'c1']);
    expect(q.counters.replacedFrames).toBe(1);
  });

  it('a replacement supersedes every queued frame of that subject, so stale state is never sent last', () => {
    const q = new OperatorSendQueue<string>(3);
    q.push(state('node/a', 'a1'));
    q.push(state('node/b', 'b1'));
    q.push(state('node/a', 'a2'));
    expect(q.push(state('node/a', 'a3'))).toBe('replaced');
    expect(drain(q)).toEqual(['a3', 'b1']);
  });

  it('node.observed and node.removed of the same node share a key: the latest statement wins', () => {
    const q = new OperatorSendQueue<string>(2);
    q.push(state('node/a', 'observed a'));
    q.push(state('node/b', 'observed b'));
    expect(q.push(state('node/a', 'removed a'))).toBe('replaced');
    expect(drain(q)).toEqual(['removed a', 'observed b']);
  });

  it('events are exempt: when full they are dropped from the tail and the drop is counted', () => {
    const q = new OperatorSendQueue<string>(2);
    q.push(event('e1'));
    q.push(event('e2'));
    expect(q.push(event('e3'))).toBe('dropped_event');
    expect(drain(q)).toEqual(['e1', 'e2']);
    expect(q.counters.droppedEvents).toBe(1);
  });

  it('when full and nothing matches, the oldest frame overall is evicted and counted as a drop', () => {
    const q = new OperatorSendQueue<string>(2);
    q.push(state('node/a', 'a1'));
    q.push(event('e1'));
    expect(q.push(state('node/z', 'z1'))).toBe('evicted_oldest');
    expect(drain(q)).toEqual(['e1', 'z1']);
    expect(q.counters.evictedFrames).toBe(1);
    expect(q.push(state('node/y', 'y1'))).toBe('evicted_oldest');
    expect(q.counters.droppedEvents).toBe(1);
  });

  it('control frames (resync framing, errors, operations) are never evicted, and may use the reserve', () => {
    const q = new OperatorSendQueue<string>(2, 1);
    q.push(control('begin'));
    q.push(state('node/a', 'a1'));
    expect(q.push(control('end'))).toBe('evicted_oldest');
    expect(drain(q)).toEqual(['begin', 'end']);
    expect(q.push(control('result'))).toBe('appended');
    expect(q.push(control('another'))).toBe('rejected');
    expect(q.push(state('node/b', 'b1'))).toBe('dropped_state');
    expect(drain(q)).toEqual(['begin', 'end', 'result']);
  });

  it('shift takes frames oldest first and frees their keys', () => {
    const q = new OperatorSendQueue<string>(2);
    q.push(state('node/a', 'a1'));
    q.push(state('node/b', 'b1'));
    expect(q.shift()).toBe('a1');
    q.push(state('node/c', 'c1'));
    expect(q.push(state('node/a', 'a2'))).toBe('evicted_oldest');
    expect(drain(q)).toEqual(['c1', 'a2']);
  });

  it('shiftFirst takes the oldest frame not held back; held ones keep their places, order and keys', () => {
    const q = new OperatorSendQueue<string>(4);
    q.push(state('node/a', 'a1'));
    q.push(control('op'));
    q.push(state('node/b', 'b1'));
    q.push(event('e'));
    const held = (v: string, cls: string) => cls === 'state' && v === 'a1';
    expect(q.shiftFirst(held)).toBe('op');
    expect(q.shiftFirst(held)).toBe('b1');
    expect(q.shiftFirst(held)).toBe('e');
    expect(q.shiftFirst(held)).toBeUndefined();
    expect(drain(q)).toEqual(['a1']);
    expect(q.hasKey('node/b')).toBe(false);
    expect(q.hasKey('node/a')).toBe(true);
  });
});

describe('hub send queue', () => {
  it('never drops: when full it refuses and the caller closes the connection', () => {
    const q = new HubSendQueue<string>(2, 1000);
    expect(q.push('a', 10)).toBe(true);
    expect(q.push('b', 10)).toBe(true);
    expect(q.push('c', 10)).toBe(false);
    expect(q.shift()).toBe('a');
    expect(q.shift()).toBe('b');
    expect(q.shift()).toBe(undefined);
  });

  it('is bounded in bytes too', () => {
    const q = new HubSendQueue<string>(100, 25);
    expect(q.push('a', 20)).toBe(true);
    expect(q.push('b', 10)).toBe(false);
    expect(q.bytes).toBe(20);
  });
});
