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

  it("shows a failed comparison's diff, without its colours, cut after a screenful", () => {
    const diff = ['\x1b[32m- Expected\x1b[39m', '\x1b[31m+ Received\x1b[39m', '', '  Object {', '-   "meta": true,', '+   "meta": false,', '  }'].join('\n');
    const lines = flakyLines([{ project: 'workers', file: 'f', name: 'n', retries: 1, errors: [{ name: 'AssertionError', message: 'expected { …(5) } to match object', diff }] }]);
    expect(lines.slice(2)).toEqual([
      '   try 1: AssertionError: expected { …(5) } to match object',
      '     | - Expected',
      '     | + Received',
      '     | ',
      '     |   Object {',
      '     | -   "meta": true,',
      '     | +   "meta": false,',
      '     |   }',
    ]);
    const long = flakyLines([{ project: 'unit', file: 'f', name: 'n', retries: 1, errors: [{ message: 'm', diff: Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n') }] }]);
    expect(long.filter((l) => l.startsWith('     | line'))).toHaveLength(24);
    expect(long.at(-1)).toBe('     | … 76 more lines');
  });

  it('cuts a long message', () => {
    const [, , first] = flakyLines([{ project: 'unit', file: 'f', name: 'n', retries: 1, errors: [{ message: 'x'.repeat(5_000) }] }]);
    expect(first?.length).toBeLessThan(1_100);
    expect(first).toMatch(/^ {3}try 1: Error: x+…$/);
  });
});
