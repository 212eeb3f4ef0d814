/**
 * vitest's sequencer for the suite: the order of test/support/file-order.ts, from the durations
 * of a recorded run (test/support/file-durations.json; `npm run test:durations -- <report.json>`
 * rewrites it from a run's JSON report). Sharding stays vitest's own.
 */
import { statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { orderFiles } from './file-order';

const DURATIONS = new URL('./file-durations.json', import.meta.url);

async function recordedDurations(): Promise<Record<string, number>> {
  try {
    const parsed: unknown = JSON.parse(await readFile(DURATIONS, 'utf8'));
    if (typeof parsed !== 'object' || parsed === null) return {};
    return Object.fromEntries(Object.entries(parsed).filter((e): e is [string, number] => typeof e[1] === 'number'));
  } catch {
    // No record (or an unreadable one) is not a reason to fail a run: vitest's order by size.
    return {};
  }
}

export default class SuiteSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const durations = await recordedDurations();
    const root = this.ctx.config.root;
    const entries = files.map((spec) => {
      let size = 0;
      try {
        size = statSync(spec.moduleId).size;
      } catch {
        // A file vitest found but cannot stat orders as an empty one.
      }
      return { spec, project: spec.project.name, file: path.relative(root, spec.moduleId).split(path.sep).join('/'), size };
    });
    return orderFiles(entries, durations).map((e) => e.spec);
  }
}
