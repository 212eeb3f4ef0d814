/**
 * Tests that passed only on their retry, with the error of each failed try, printed once the run
 * ends (after the default reporter's summary, so the tail of a CI log holds them). The default
 * reporter marks such a test "(retry x1)" and prints nothing of why, so a flaky test left no trace
 * to diagnose it by; vitest keeps the errors of a test retried successfully in its result.
 */
import type { Reporter, TestCase } from 'vitest/node';

/** What the lines are made of: a test's identity and the errors of its failed tries. */
export interface FlakyTest {
  project: string;
  file: string;
  name: string;
  retries: number;
  errors: readonly { name?: string | undefined; message: string; stack?: string | undefined; diff?: string | undefined }[];
}

const MESSAGE_CHARS = 1_000;
const STACK_LINES = 6;
/** A failed comparison's diff: which of an object's fields differed (the message alone hides them as `…(5)`). */
const DIFF_LINES = 24;

export function flakyLines(tests: readonly FlakyTest[]): string[] {
  if (tests.length === 0) return [];
  const out = [`Passed only on retry: ${tests.length} test(s); the error of each failed try:`];
  for (const t of tests) {
    out.push(` [${t.project}] ${t.file} > ${t.name} (retried ${t.retries}x)`);
    for (const [i, e] of t.errors.entries()) {
      const message = e.message.length > MESSAGE_CHARS ? `${e.message.slice(0, MESSAGE_CHARS)}…` : e.message;
      out.push(`   try ${i + 1}: ${e.name ?? 'Error'}: ${message.replaceAll('\n', '\n     ')}`);
      if (e.diff) {
        const diff = e.diff.replace(/\x1b\[[0-9;]*m/g, '').split('\n');
        for (const l of diff.slice(0, DIFF_LINES)) out.push(`     | ${l}`);
        if (diff.length > DIFF_LINES) out.push(`     | … ${diff.length - DIFF_LINES} more lines`);
      }
      // The stack's first line repeats the message; the frames after it say where, the project's
      // own first (vitest's runner is in every stack).
      const all = (e.stack ?? '').split('\n').filter((l) => /^\s*at /.test(l));
      const own = all.filter((l) => !l.includes('/node_modules/') && !l.includes('(<anonymous>)'));
      const frames = (own.length > 0 ? own : all).slice(0, STACK_LINES);
      for (const f of frames) out.push(`     ${f.trim()}`);
    }
  }
  return out;
}

export default class FlakyReporter implements Reporter {
  private readonly flaky: FlakyTest[] = [];

  onTestCaseResult(testCase: TestCase): void {
    const result = testCase.result();
    if (result.state !== 'passed' || !result.errors || result.errors.length === 0) return;
    this.flaky.push({
      project: testCase.project.name,
      file: testCase.module.relativeModuleId,
      name: testCase.fullName,
      retries: testCase.diagnostic()?.retryCount ?? result.errors.length,
      errors: result.errors,
    });
  }

  onTestRunEnd(): void {
    const lines = flakyLines(this.flaky);
    if (lines.length > 0) process.stdout.write(`\n${lines.join('\n')}\n`);
  }
}
