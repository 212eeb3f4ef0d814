/**
 * The lines printed at the end of a run for tests that passed only on their retry
 * (test/support/flaky-reporter.ts): each test, then each failed try's error with where it was
 * thrown in the project's own code, not in vitest's runner.
 */
import { describe, expect, it } from 'vitest';
import { flakyLines } from '../support/flaky-reporter';

describe('flaky test report', () => {
  it('says nothing when no test needed its retry', () => {
    expect(flakyLines([])).toEqual([]);
  });

  it("names each test and its failed tries' errors, with the project's own frames first", () => {
    const stack = [
      'AssertionError: expected 1 to be 2',
      '    at /repo/node_modules/@vitest/runner/dist/chunk.js:302:11',
      '    at new Promise (<anonymous>)',
      '    at /repo/test/hub/x.test.ts:5:40',
      '    at helper (/repo/test/hub/support/hub.ts:10:3)',
    ].join('\n');
    const lines = flakyLines([
      { project: 'hub', file: 'test/hub/x.test.ts', name: 'suite > case', retries: 1, errors: [{ name: 'AssertionError', message: 'expected 1 to be 2\nmore', stack }] },
    ]);
    expect(lines).toEqual([
      'Passed only on retry: 1 test(s); the error of each failed try:',
      ' [hub] test/hub/x.test.ts > suite > case (retried 1x)',
      '   try 1: AssertionError: expected 1 to be 2\n     more',
      '     at /repo/test/hub/x.test.ts:5:40',
      '     at helper (/repo/test/hub/support/hub.ts:10:3)',
    ]);
  });

  it('cuts a long message', () => {
    const [, , first] = flakyLines([{ project: 'unit', file: 'f', name: 'n', retries: 1, errors: [{ message: 'x'.repeat(5_000) }] }]);
    expect(first?.length).toBeLessThan(1_100);
    expect(first).toMatch(/^ {3}try 1: Error: x+…$/);
  });
});
