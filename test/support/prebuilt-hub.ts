/**
 * The hub built once for a whole `vitest run`, and a wrangler.toml that starts that build as it
 * is. Wrangler's dev environment bundles the Worker again at every start (esbuild, its source map
 * and module collection: about a tenth of the suite's CPU over some two hundred hub starts on these
 * two cores, and more on a slow machine); the suite's hubs start from this one build instead.
 *
 * The build is `wrangler deploy --dry-run`'s, the artefact a deploy uploads. Its dashboard files
 * are text modules named by their content's hash beside `index.js`, so the copied configuration
 * says they are text by those names, and that the main module needs no bundling (`no_bundle`).
 * Everything else in the configuration (bindings, migrations, regions) is the repository's, as
 * written. `npm start` and the start tests still build the way a developer's hub does.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The [[rules]] block of the repository's wrangler.toml: the dashboard's files as text, by source path. */
const RULES = /\[\[rules\]\]\ntype = "Text"\nglobs = \[[^\]]*\]\nfallthrough = true\n/;

/** The build's text modules: `<hash>-<name>.js`, `.css`, `.html` (the main module is `index.js`). */
const BUILT_RULES = '[[rules]]\ntype = "Text"\nglobs = ["*-*.js", "*.css", "*.html"]\nfallthrough = true\n';

function wrangler(args: string[]): Promise<string> {
  const bin = path.join(path.dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], {
      cwd: ROOT,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: 'true', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d));
    child.stderr.on('data', (d: Buffer) => (output += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(output) : reject(new Error(`wrangler ${args.join(' ')} exited ${code}:\n${output}`))));
  });
}

/** Build the hub into `dir`; returns the path of a wrangler.toml that starts the build unbundled. */
export async function prebuildHub(dir: string): Promise<string> {
  const out = path.join(dir, 'build');
  await wrangler(['deploy', '--dry-run', '--outdir', out]);
  const source = await readFile(path.join(ROOT, 'wrangler.toml'), 'utf8');
  if (!RULES.test(source)) throw new Error('prebuildHub: wrangler.toml has no [[rules]] block of the expected shape for the dashboard files');
  const mainLine = /^main = "src\/hub\/index\.ts"$/m;
  if (!mainLine.test(source)) throw new Error('prebuildHub: wrangler.toml main is not src/hub/index.ts');
  const config = source
    .replace(mainLine, 'main = "build/index.js"\nno_bundle = true\nbase_dir = "build"')
    .replace(RULES, BUILT_RULES);
  const file = path.join(dir, 'wrangler.toml');
  await writeFile(file, config);
  return file;
}
