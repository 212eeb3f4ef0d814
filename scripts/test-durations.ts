/**
 * `npm run test:durations -- <report.json>`: rewrite test/support/file-durations.json (the seconds
 * each test file took, which the suite's sequencer orders files by) from a JSON report of a whole
 * run: `npm test -- --reporter=default --reporter=json --outputFile.json=<report.json>`.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

const Report = z.object({
  testResults: z.array(z.object({ name: z.string(), startTime: z.number(), endTime: z.number() })),
});

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const OUT = path.join(ROOT, 'test/support/file-durations.json');

const file = process.argv[2];
if (!file) {
  console.error('usage: npm run test:durations -- <vitest JSON report>');
  process.exit(2);
}
const report = Report.parse(JSON.parse(await readFile(file, 'utf8')));
const entries = report.testResults
  .map((r) => {
    const abs = path.resolve(r.name);
    // A report from a clone elsewhere: keep the part from test/ on.
    const rel = abs.startsWith(ROOT) ? path.relative(ROOT, abs) : abs.slice(abs.lastIndexOf('/test/') + 1);
    return [rel.split(path.sep).join('/'), Math.round((r.endTime - r.startTime) / 100) / 10] as const;
  })
  .sort((a, b) => (a[0] < b[0] ? -1 : 1));
await writeFile(OUT, `${JSON.stringify(Object.fromEntries(entries), null, 1)}\n`);
console.log(`${entries.length} files' durations written to ${path.relative(ROOT, OUT)}`);
