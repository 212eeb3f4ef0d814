/**
 * The hand-over order of one connection's statements (src/hub/pg-handover.ts), without a
 * driver: the real connection's behaviour is in test/workers/pg-handover.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HandOver } from '../../src/hub/pg-handover';

class NotSent extends Error {}

function setup() {
  const discarded: number[] = [];
  let connection = 1;
  const h = new HandOver(
    () => discarded.push(connection++),
    (ms) => new NotSent(`busy for ${ms} ms`),
  );
  return { h, discarded };
}

/** The number a hand-over gives, or what it still waits for. */
function state(p: number | Promise<number>): { now: number } | { later: Promise<number> } {
  return typeof p === 'number' ? { now: p } : { later: p };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('statements handed to the driver', () => {
  it('at most maxInDriver plain ones at once; the rest wait, in order, for a place', async () => {
    const h = new HandOver(() => undefined, (ms) => new NotSent(`busy for ${ms} ms`), 2);
    expect([h.next(false, 100), h.next(false, 100)]).toEqual([1, 2]);
    const third = state(h.next(false, 100));
    const fourth = state(h.next(false, 100));
    expect(['later' in third, 'later' in fourth]).toEqual([true, true]);
    h.settled(1, true);
    await expect((third as { later: Promise<number> }).later).resolves.toBe(3);
    h.settled(2, true);
    await expect((fourth as { later: Promise<number> }).later).resolves.toBe(4);
  });

  it('a plain or low one still waiting after dropAfterMs is dropped unsent, as the driver dropped one queued past its deadline', async () => {
    const h = new HandOver(() => undefined, (ms) => new NotSent(`busy for ${ms} ms`), 1, 1_000);
    expect(h.next(false, 100)).toBe(1);
    const plain = h.next(false, 100) as Promise<number>;
    const low = h.next(false, 100, true) as Promise<number>;
    const dropped = Promise.all([expect(plain).rejects.toBeInstanceOf(NotSent), expect(low).rejects.toBeInstanceOf(NotSent)]);
    vi.advanceTimersByTime(1_000);
    await dropped;
    expect(h.waitingCount).toBe(0);
    h.settled(1, true);
    expect(h.next(false, 100)).toBe(2);
  });

  it('low ones past maxLowWaiting are refused at once: a flood keeps no backlog', async () => {
    const h = new HandOver(() => undefined, (ms) => new NotSent(`busy for ${ms} ms`), 1, 10_000, 2);
    expect(h.next(false, 100)).toBe(1);
    const kept = [h.next(false, 100, true), h.next(false, 100, true)];
    await expect(h.next(false, 100, true)).rejects.toBeInstanceOf(NotSent);
    // Plain ones are not capped.
    const plain = h.next(false, 100) as Promise<number>;
    h.settled(1, true);
    await expect(plain).resolves.toBe(2);
    expect(kept.every((k) => k instanceof Promise)).toBe(true);
  });

  it('a low one (a token lookup) waits behind every plain and strict one waiting, in the order asked among its own', async () => {
    const h = new HandOver(() => undefined, (ms) => new NotSent(`busy for ${ms} ms`), 1);
    expect(h.next(false, 100)).toBe(1);
    const order: string[] = [];
    const ask = (what: string, strict: boolean, low: boolean) => void (h.next(strict, 1_000, low) as Promise<number>).then((n) => order.push(`${what} ${n}`));
    ask('low-a', false, true);
    ask('plain-a', false, false);
    ask('low-b', false, true);
    ask('strict', true, false);
    ask('plain-b', false, false);
    for (let n = 1; n <= 5; n++) {
      h.settled(n, true);
      await Promise.resolve();
      await Promise.resolve();
    }
    expect(order).toEqual(['strict 2', 'plain-a 3', 'plain-b 4', 'low-a 5', 'low-b 6']);
  });

  it('a strict one goes ahead of the plain ones waiting, and waits only for those in the driver', async () => {
    // A flood keeps the queue full: behind it, the strict statement was never handed over in time.
    const h = new HandOver(() => undefined, (ms) => new NotSent(`busy for ${ms} ms`), 2);
    expect([h.next(false, 100), h.next(false, 100)]).toEqual([1, 2]);
    const plain = Array.from({ length: 50 }, () => h.next(false, 100) as Promise<number>);
    const strict = h.next(true, 1_000) as Promise<number>;
    const order: string[] = [];
    void strict.then(() => order.push('strict'));
    for (const p of plain.slice(0, 2)) void p.then((n) => order.push(`plain ${n}`));
    h.settled(1, true);
    h.settled(2, true);
    await expect(strict).resolves.toBe(3);
    h.settled(3, true);
    await Promise.all(plain.slice(0, 2));
    expect(order).toEqual(['strict', 'plain 4', 'plain 5']);
  });

  it('go at once and in order when none is strict, numbered as handed', () => {
    const { h } = setup();
    expect([h.next(false, 100), h.next(false, 100), h.next(false, 100)]).toEqual([1, 2, 3]);
  });

  it('a strict one waits until nothing else is in the driver, then goes', async () => {
    const { h } = setup();
    expect(h.next(false, 100)).toBe(1);
    const s = state(h.next(true, 1_000));
    expect('later' in s).toBe(true);
    // A plain statement asked after it waits behind it: the order asked is kept.
    const after = state(h.next(false, 1_000));
    expect('later' in after).toBe(true);
    h.settled(1, true);
    await expect((s as { later: Promise<number> }).later).resolves.toBe(2);
    await expect((after as { later: Promise<number> }).later).resolves.toBe(3);
  });

  it('a strict one still waiting at its send-by time is never sent, and what waited behind it goes', async () => {
    const { h } = setup();
    expect(h.next(false, 100)).toBe(1);
    const s = h.next(true, 500) as Promise<number>;
    const behind = h.next(false, 5_000) as Promise<number>;
    const refused = expect(s).rejects.toBeInstanceOf(NotSent);
    vi.advanceTimersByTime(500);
    await refused;
    await expect(behind).resolves.toBe(2);
    // The statement that was not sent took no number: the next one answered settles the queue.
    h.settled(1, true);
    h.settled(2, true);
    expect(h.next(true, 100)).toBe(3);
  });

  it('after a statement ran out its deadline, a strict one waits for an answer to a later one', async () => {
    const { h, discarded } = setup();
    expect(h.next(false, 100)).toBe(1);
    expect(h.next(false, 100)).toBe(2);
    h.suspect(1);
    h.settled(1, false);
    const s = h.next(true, 1_000) as Promise<number>;
    expect(typeof s).toBe('object');
    // The driver answers in order: the answer to statement 2 shows statement 1 is over.
    h.settled(2, true);
    await expect(s).resolves.toBe(3);
    expect(discarded).toEqual([]);
  });

  it('with nothing else in the driver to show it over, a strict one drops the connection a suspect may run on', () => {
    const { h, discarded } = setup();
    expect(h.next(false, 100)).toBe(1);
    h.suspect(1);
    h.settled(1, false);
    expect(h.next(true, 1_000)).toBe(2);
    expect(discarded).toEqual([1]);
    // A plain statement does not drop it: it may queue behind the suspect.
    const { h: h2, discarded: d2 } = setup();
    expect(h2.next(false, 100)).toBe(1);
    h2.suspect(1);
    h2.settled(1, false);
    expect(h2.next(false, 100)).toBe(2);
    expect(d2).toEqual([]);
  });

  it('a connection gone clears the suspect: nothing of it can still run', () => {
    const { h, discarded } = setup();
    expect(h.next(false, 100)).toBe(1);
    h.suspect(1);
    h.settled(1, false);
    h.connectionGone();
    expect(h.next(true, 1_000)).toBe(2);
    expect(discarded).toEqual([]);
  });
});
