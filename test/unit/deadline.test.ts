import { afterEach, describe, expect, it, vi } from 'vitest';
import { withDeadline } from '../../src/hub/deadline';

afterEach(() => {
  vi.useRealTimers();
});

describe('withDeadline', () => {
  it("is the work's value when it settles in time, and leaves no timer behind", async () => {
    vi.useFakeTimers();
    const late = vi.fn(() => 'late');
    await expect(withDeadline(Promise.resolve('done'), 1_000, late)).resolves.toBe('done');
    expect(vi.getTimerCount()).toBe(0);
    expect(late).not.toHaveBeenCalled();
  });

  it("is the work's rejection when it fails in time", async () => {
    await expect(withDeadline(Promise.reject(new Error('refused')), 1_000, () => 'late')).rejects.toThrow('refused');
  });

  it("is late()'s value, or what late() throws, when the work takes longer; the work's later failure is not unhandled", async () => {
    vi.useFakeTimers();
    let fail: (e: Error) => void = () => {};
    const slow = new Promise<string>((_, reject) => {
      fail = reject;
    });
    const value = withDeadline(slow, 1_000, () => null);
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(value).resolves.toBeNull();
    const thrown = withDeadline(new Promise<string>(() => {}), 500, () => {
      throw new Error('deadline');
    });
    const assertion = expect(thrown).rejects.toThrow('deadline');
    await vi.advanceTimersByTimeAsync(500);
    await assertion;
    vi.useRealTimers();
    const unhandled = vi.fn();
    process.on('unhandledRejection', unhandled);
    try {
      fail(new Error('too late'));
      await new Promise((r) => setImmediate(r));
      expect(unhandled).not.toHaveBeenCalled();
    } finally {
      process.off('unhandledRejection', unhandled);
    }
  });
});
