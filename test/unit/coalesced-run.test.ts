import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CoalescedRun } from '../../src/hub/session/coalesced-run';

interface Runner {
  request(): Promise<void>;
}

/**
 * The drain as it was before the fix: the running flag cleared by `.finally()` on the loop's
 * promise, one microtask after the loop's last check. Kept here to prove the test catches it.
 */
class ClearedLater implements Runner {
  private requested = false;
  private running: Promise<void> | null = null;
  constructor(private readonly pass: () => Promise<void>) {}
  request(): Promise<void> {
    this.requested = true;
    if (!this.running) {
      this.running = this.loop().finally(() => {
        this.running = null;
      });
    }
    return this.running;
  }
  private async loop(): Promise<void> {
    while (this.requested) {
      this.requested = false;
      await this.pass();
    }
  }
}

const tick = () => Promise.resolve();

async function settle(): Promise<void> {
  for (let i = 0; i < 50; i++) await tick();
}

/**
 * Drive a runner: each pass takes `passTicks[i]` microtasks; requests are made at the given
 * microtask offsets. Returns, per request, whether some pass started after it.
 */
async function drive(make: (pass: () => Promise<void>) => Runner, passTicks: number[], requestAt: number[]): Promise<boolean[]> {
  let starts = 0;
  let passIndex = 0;
  const pass = async () => {
    starts++;
    const n = passTicks[passIndex++ % passTicks.length] ?? 0;
    for (let i = 0; i < n; i++) await tick();
  };
  const runner = make(pass);
  const seen: number[] = [];
  const sorted = [...requestAt].sort((a, b) => a - b);
  let now = 0;
  for (const at of sorted) {
    while (now < at) {
      await tick();
      now++;
    }
    seen.push(starts);
    void runner.request();
  }
  await settle();
  return seen.map((startsBefore) => starts > startsBefore);
}

const fixed = (pass: () => Promise<void>) => new CoalescedRun(pass, (err) => {
  throw err;
});

describe('CoalescedRun (the session send-queue drain)', () => {
  it('requests made while a pass runs coalesce into one further pass', async () => {
    let passes = 0;
    let release: () => void = () => {};
    const run = new CoalescedRun(
      () =>
        new Promise<void>((resolve) => {
          passes++;
          release = resolve;
        }),
      () => {},
    );
    void run.request();
    expect(passes).toBe(1);
    for (let i = 0; i < 100; i++) void run.request();
    release();
    await settle();
    expect(passes).toBe(2);
    release();
    await settle();
    expect(passes).toBe(2);
  });

  it('every request is followed by a pass that starts after it, whatever the timing (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 4 }),
        fc.array(fc.integer({ min: 0, max: 12 }), { minLength: 1, maxLength: 6 }),
        async (passTicks, requestAt) => {
          const served = await drive(fixed, passTicks, requestAt);
          expect(served.every(Boolean)).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('catches the lost wake-up of a flag cleared one microtask late (the bug this replaced)', async () => {
    // Pass of 0 ticks, then a request 2 microtasks after the first: it lands after the loop's last
    // check and before the late `.finally()`, finds the runner "busy", and no pass follows it.
    let lost = false;
    for (let at = 1; at <= 6 && !lost; at++) {
      const served = await drive((pass) => new ClearedLater(pass), [0], [0, at]);
      if (!served.every(Boolean)) lost = true;
    }
    expect(lost).toBe(true);
  });

  it('a pass that throws is reported once, and a later request runs again', async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const run = new CoalescedRun(
      async () => {
        calls++;
        if (calls === 1) throw new Error('boom');
      },
      (err) => errors.push(err),
    );
    await run.request();
    expect(errors).toHaveLength(1);
    await run.request();
    expect(calls).toBe(2);
    expect(errors).toHaveLength(1);
  });
});
