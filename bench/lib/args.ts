/**
 * The benchmark's command line (bench/run.ts), parsed apart from the run so it can be tested:
 * a value that is not what the flag takes is refused before anything starts.
 */
export interface BenchArgs {
  quick: boolean;
  pooler: boolean;
  profile: boolean;
  vars: Record<string, string>;
  only: string[] | null;
  reps: number;
  out: string | null;
  render: string | null;
  commit: string | null;
  devPaths: boolean;
}

/** The parsed arguments, or 'help' when the usage was asked for. Throws on anything it cannot take. */
/** `--var KEY=VALUE`: a hub setting for the run (the value may hold '='). */
export function hubVar(kv: string): [string, string] {
  const [k, ...rest] = kv.split('=');
  if (!k || rest.length === 0) throw new Error('--var needs KEY=VALUE');
  return [k, rest.join('=')];
}

export function parseBenchArgs(argv: readonly string[], scenarios: readonly string[]): BenchArgs | 'help' {
  const a: BenchArgs = { quick: false, pooler: false, profile: false, vars: {}, only: null, reps: 3, out: null, render: null, commit: null, devPaths: false };
  let repsGiven = false;
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i];
    const next = () => {
      const n = argv[++i];
      if (n === undefined) throw new Error(`${v} needs a value`);
      return n;
    };
    if (v === '--quick') a.quick = true;
    else if (v === '--pooler') a.pooler = true;
    else if (v === '--profile') a.profile = true;
    else if (v === '--var') {
      const [k, value] = hubVar(next());
      a.vars[k] = value;
    } else if (v === '--only') a.only = next().split(',').map((s) => s.trim()).filter(Boolean);
    else if (v === '--reps') {
      // Math.max(1, Number(x)) was NaN for `--reps three`: no repetition ran and nothing was measured.
      const raw = next();
      const n = Number(raw);
      if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < 1) throw new Error(`--reps needs a whole number of at least 1 (got ${raw})`);
      a.reps = n;
      repsGiven = true;
    } else if (v === '--out') a.out = next();
    else if (v === '--render') a.render = next();
    else if (v === '--commit') a.commit = next();
    else if (v === '--dev-paths') a.devPaths = true;
    else if (v === '--help' || v === '-h') return 'help';
    else throw new Error(`unknown argument ${v}`);
  }
  if (a.only) {
    const unknown = a.only.filter((n) => !scenarios.includes(n));
    if (unknown.length) throw new Error(`unknown scenario(s): ${unknown.join(', ')}; known: ${scenarios.join(', ')}`);
  }
  if (a.quick && !repsGiven) a.reps = 1;
  return a;
}
