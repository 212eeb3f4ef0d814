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
 *
 * The build starts through a small entry of its own (ENTRY) that does what wrangler's dev server
 * wraps every Worker in (its "ensure request body drained" middleware): a request body the hub left
 * unread is read to its end before the answer goes out. The hub answers some requests without
 * reading their bodies (a 401 before auth, a 413 on Content-Length, …), which is right at the edge;
 * but local workerd, answering before the upload is read, resets the connection it came on, and the
 * client (or the dev server's proxy in front, whose fetch then fails: "Your worker restarted
 * mid-request", a 503) saw a reset instead of the answer, now and then, as the two raced. The suite's
 * hubs answer as `wrangler dev` and `npm start` do.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The [[rules]] block of the repository's wrangler.toml: the dashboard's files as text, by source path. */
const RULES = /\[\[rules\]\]\ntype = "Text"\nglobs = \[[^\]]*\]\nfallthrough = true\n/;

/** The build's text modules: `<hash>-<name>.js`, `.css`, `.html`; and the hub's module, `index.js`, which ENTRY imports. */
const BUILT_RULES = '[[rules]]\ntype = "Text"\nglobs = ["*-*.js", "*.css", "*.html"]\nfallthrough = true\n[[rules]]\ntype = "ESModule"\nglobs = ["index.js"]\n';

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

/**
 * The main module of the suite's build: the hub's own exports (its Durable Object classes), and its
 * fetch handler behind the drain wrangler's dev server puts there. Named without a `-`, so the text
 * rule (BUILT_RULES) does not take it for a dashboard file.
 */
const ENTRY_NAME = 'entry.js';
const ENTRY = `import hub from './index.js';
export * from './index.js';
export default {
  async fetch(request, env, ctx) {
    try {
      return await hub.fetch(request, env, ctx);
    } finally {
      if (request.body !== null && !request.bodyUsed) {
        try {
          const reader = request.body.getReader();
          while (!(await reader.read()).done) {}
        } catch {}
      }
    }
  },
};
`;

/** Build the hub into `dir`; returns the path of a wrangler.toml that starts the build unbundled. */
export async function prebuildHub(dir: string): Promise<string> {
  const out = path.join(dir, 'build');
  await wrangler(['deploy', '--dry-run', '--outdir', out]);
  const built = await readFile(path.join(out, 'index.js'), 'utf8');
  if (!/^export default /m.test(built) && !/as default\b/.test(built)) throw new Error('prebuildHub: the build has no default export to wrap');
  await writeFile(path.join(out, ENTRY_NAME), ENTRY);
  const source = await readFile(path.join(ROOT, 'wrangler.toml'), 'utf8');
  if (!RULES.test(source)) throw new Error('prebuildHub: wrangler.toml has no [[rules]] block of the expected shape for the dashboard files');
  const mainLine = /^main = "src\/hub\/index\.ts"$/m;
  if (!mainLine.test(source)) throw new Error('prebuildHub: wrangler.toml main is not src/hub/index.ts');
  const config = source
    .replace(mainLine, `main = "build/${ENTRY_NAME}"\nno_bundle = true\nbase_dir = "build"`)
    .replace(RULES, BUILT_RULES);
  const file = path.join(dir, 'wrangler.toml');
  await writeFile(file, config);
  return file;
}

/** A module of the build as Miniflare takes it: its type, its path, its text (read once). */
export interface BuiltModule {
  type: 'ESModule' | 'Text';
  path: string;
  contents: string;
}

/** The build's text modules: `<40 hex digits>-<name>.js|.css|.html` (the dashboard's files). */
const TEXT_MODULE = /^[0-9a-f]{40}-[^/]+\.(js|css|html)$/;

const modulesByConfig = new Map<string, { modulesRoot: string; modules: BuiltModule[] }>();

/**
 * The modules of the build beside `configPath` (prebuildHub's), the main module first, read once
 * per process: a suite's worker starts dozens of hubs from it, and Miniflare given only the main
 * module's path parses the 1.6 MB bundle again at each start to find its imports.
 */
export function prebuiltModules(configPath: string): { modulesRoot: string; modules: BuiltModule[] } {
  const known = modulesByConfig.get(configPath);
  if (known) return known;
  const modulesRoot = path.join(path.dirname(configPath), 'build');
  const read = (name: string, type: BuiltModule['type']): BuiltModule => {
    const file = path.join(modulesRoot, name);
    return { type, path: file, contents: readFileSync(file, 'utf8') };
  };
  const text = readdirSync(modulesRoot).filter((f) => TEXT_MODULE.test(f)).sort();
  if (text.length === 0) throw new Error(`prebuiltModules: no dashboard files in ${modulesRoot}`);
  const found = { modulesRoot, modules: [read(ENTRY_NAME, 'ESModule'), read('index.js', 'ESModule'), ...text.map((f) => read(f, 'Text'))] };
  modulesByConfig.set(configPath, found);
  return found;
}
