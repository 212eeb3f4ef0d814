/**
 * A copy of the hub's source for a long run (the benchmark, the soak): wrangler builds the hub
 * from wherever its wrangler.toml is, at every start, so a run that starts it more than once, or
 * rebuilds on a change, would otherwise pick up edits made to src/ while it runs.
 */
import { execFileSync } from 'node:child_process';
import { cp, mkdtemp, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface SourceSnapshot {
  /** Directory holding wrangler.toml and src/ as measured. */
  dir: string;
  /** What was measured, for the report: a commit, or the working tree at a time. */
  label: string;
}

/**
 * The hub's source as it is measured: copied once at the start of a run, so that edits to src/
 * during the run (wrangler rebuilds and restarts workerd on every change it sees) cannot change
 * or interrupt what is being measured. With `ref`, the committed tree of that ref (`git archive`,
 * read-only) instead of the working tree.
 */
export async function snapshotSource(ref: string | null): Promise<SourceSnapshot> {
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-src-'));
  const git = (args: string[]) => {
    try {
      return execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return '';
    }
  };
  let label: string;
  if (ref) {
    const sha = git(['rev-parse', '--verify', `${ref}^{commit}`]);
    if (!sha) throw new Error(`not a commit: ${ref}`);
    execFileSync('sh', ['-c', 'git -C "$1" archive "$2" src wrangler.toml tsconfig.json | tar -x -C "$3"', 'sh', ROOT, sha, dir]);
    const subject = git(['log', '-1', '--format=%s', sha]);
    label = `commit ${sha.slice(0, 12)} “${subject.length > 90 ? `${subject.slice(0, 90)}…` : subject}”`;
  } else {
    await cp(path.join(ROOT, 'src'), path.join(dir, 'src'), { recursive: true });
    await cp(path.join(ROOT, 'wrangler.toml'), path.join(dir, 'wrangler.toml'));
    await cp(path.join(ROOT, 'tsconfig.json'), path.join(dir, 'tsconfig.json')).catch(() => undefined);
    const head = git(['rev-parse', '--short=12', 'HEAD']);
    const dirty = git(['status', '--porcelain', '--', 'src', 'wrangler.toml']).split('\n').filter(Boolean).length;
    label = `working tree at ${new Date().toISOString()} (HEAD ${head || 'unknown'}${dirty ? `, ${dirty} file(s) under src/ changed or new` : ', clean'})`;
  }
  await symlink(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  return { dir, label };
}
