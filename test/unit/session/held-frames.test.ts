/**
 * What a session object holds while a hello is in progress is bounded in memory, not only in the
 * characters of the frames: an empty frame counted nothing, so a holder of the cluster's token
 * could queue empty frames without limit for as long as a claim waited (found by a read-only
 * review of the handshake; fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { HeldFrames, HELD_FRAME_OVERHEAD } from '../../../src/hub/session/held-frames';

const ws = {} as WebSocket;

describe('frames held during a hello', () => {
  it('refuses empty frames once their entries would pass the bound', () => {
    const held = new HeldFrames(8 * 1024 * 1024);
    let n = 0;
    while (n < 10_000_000 && held.hold(ws, '')) n++;
    expect(n).toBeLessThan(10_000_000);
    expect(n).toBe(Math.floor((8 * 1024 * 1024) / HELD_FRAME_OVERHEAD));
  });

  it('holds frames up to the bound and frees it when they are taken', () => {
    const held = new HeldFrames(1_000);
    const frame = 'x'.repeat(1_000 - HELD_FRAME_OVERHEAD);
    expect(held.hold(ws, frame)).toBe(true);
    expect(held.hold(ws, '')).toBe(false);
    expect(held.take()).toEqual([[ws, frame]]);
    expect(held.hold(ws, frame)).toBe(true);
  });
});
