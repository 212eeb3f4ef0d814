/**
 * The order the suite's files start in (test/support/sequencer.ts applies it). Pure, so it is unit-tested.
 *
 * vitest keeps a project's files together whatever the order (a worker that runs files in one
 * module graph is reused only while the next file queued is of its project), so the order is by
 * project first, then the longest file first. Its own default starts projects in alphabetical
 * order and a project's largest files first (by bytes, in a fresh clone without its cache): on CI
 * that left the pool-workers project for the last 80 s of an 852 s run, at 1 to 5 of its 6 files
 * at a time, behind the unit project's 110 short files that could have filled that tail (772 s
 * with the pool-workers projects first and the unit files last).
 */

/**
 * Projects in the order they start. The browser's long files first. Then the pool-workers files,
 * which start a Miniflare each and load their modules through vitest's main process, one after
 * the other (run first, they kept 1 to 3 of the 6 slots busy for 70 s): behind the browser's
 * long files they take the slots those free. The files that need a fresh module graph, whose
 * runners start slowly, before the e2e and hub files that share one; the many short unit files
 * last, where they fill the slots the others free.
 */
export const PROJECT_ORDER = ['browser', 'workers', 'workers-eu', 'e2e-fresh', 'e2e', 'hub', 'unit-fresh', 'unit'] as const;

export interface OrderedFile {
  project: string;
  /** Relative to the repository, with forward slashes: `test/hub/desired.test.ts`. */
  file: string;
  /** Bytes, for a file with no recorded duration. */
  size: number;
}

/**
 * @param durations seconds a file took in a recorded run, by its relative path
 *   (test/support/file-durations.json). A file not in it (new since) is given its project's
 *   median duration, or, in a project with none recorded, ordered after the recorded ones by size.
 */
export function orderFiles<T extends OrderedFile>(files: readonly T[], durations: Readonly<Record<string, number>>): T[] {
  const rank = (project: string) => {
    const i = (PROJECT_ORDER as readonly string[]).indexOf(project);
    return i === -1 ? PROJECT_ORDER.length : i;
  };
  const medians = new Map<string, number>();
  for (const project of new Set(files.map((f) => f.project))) {
    const known = files
      .filter((f) => f.project === project && durations[f.file] !== undefined)
      .map((f) => durations[f.file]!)
      .sort((a, b) => a - b);
    if (known.length > 0) medians.set(project, known[Math.floor(known.length / 2)]!);
  }
  const expected = (f: T) => durations[f.file] ?? medians.get(f.project) ?? -1;
  return [...files].sort(
    (a, b) =>
      rank(a.project) - rank(b.project) ||
      (a.project < b.project ? -1 : a.project > b.project ? 1 : 0) ||
      expected(b) - expected(a) ||
      b.size - a.size ||
      (a.file < b.file ? -1 : a.file > b.file ? 1 : 0),
  );
}
