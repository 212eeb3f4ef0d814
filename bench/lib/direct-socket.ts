/**
 * A socket straight to the hub's Worker inside local workerd, bypassing Miniflare's entry worker.
 *
 * Locally every request and upgrade enters through Miniflare's entry worker (a JavaScript worker
 * in the same workerd that fabricates `request.cf`, rewrites URLs for the dev registry and renders
 * dev error pages) before it reaches the Worker; a deployment has no such hop. Measured here
 * with Node's fetch on a Worker that answers 404: 0.67–1.08 ms through the entry, 0.25–0.39 ms
 * straight to the Worker. Miniflare can add a socket bound to a Worker (`unsafeDirectSockets`),
 * but wrangler's dev environment builds Miniflare's options itself and exposes no such setting.
 * So, before wrangler is loaded, the `miniflare` module wrangler requires is replaced by one
 * whose `Miniflare` adds that socket to the Worker named `workerName` (and only to it: the same
 * class runs wrangler's ProxyWorker). With an `[assets]` block the socket still goes through
 * the assets router, as a deployment's requests do.
 */
import { createRequire } from 'node:module';

interface MiniflareLike {
  ready: Promise<URL>;
  unsafeGetDirectURL(worker?: string): Promise<URL>;
}
interface WorkerOptionsLike {
  name?: string;
  unsafeDirectSockets?: { host?: string; port?: number }[];
}
interface MiniflareModule {
  Miniflare: new (opts: { workers?: WorkerOptionsLike[] }) => MiniflareLike;
}

const require = createRequire(import.meta.url);
/** Workers that get a direct socket, and the Miniflare each was last started in. */
const wanted = new Set<string>();
const started = new Map<string, MiniflareLike>();
let installed = false;

/** Install the replacement; call before anything loads wrangler. Idempotent. */
export function installDirectSocket(): void {
  if (installed) return;
  const wranglerPath = require.resolve('wrangler');
  const miniflarePath = require.resolve('miniflare', { paths: [wranglerPath] });
  if (require.cache[wranglerPath]) throw new Error('installDirectSocket: wrangler is already loaded');
  const real = require(miniflarePath) as MiniflareModule;
  class DirectMiniflare extends real.Miniflare {
    constructor(opts: { workers?: WorkerOptionsLike[] }) {
      const workers = opts.workers?.map((w) =>
        w.name && wanted.has(w.name) && !w.unsafeDirectSockets?.length
          ? { ...w, unsafeDirectSockets: [{ host: '127.0.0.1', port: 0 }] }
          : w,
      );
      super(workers ? { ...opts, workers } : opts);
      for (const w of workers ?? []) if (w.name && wanted.has(w.name)) started.set(w.name, this);
    }
  }
  const cached = require.cache[miniflarePath];
  if (!cached) throw new Error('installDirectSocket: miniflare is not in the module cache');
  // The module's exports are getters that cannot be redefined; a proxy answers for the class.
  cached.exports = new Proxy(real, {
    get: (target, key, receiver) => (key === 'Miniflare' ? DirectMiniflare : Reflect.get(target, key, receiver)),
  });
  installed = true;
}

/** Ask for a direct socket on the Worker `workerName` in the next Miniflare that runs it. */
export function wantDirectSocket(workerName: string): void {
  started.delete(workerName);
  wanted.add(workerName);
}

/** The origin of the Worker's direct socket, once its Miniflare is ready. */
export async function directOrigin(workerName: string): Promise<string | null> {
  const mf = started.get(workerName);
  if (!mf) return null;
  await mf.ready;
  const u = await mf.unsafeGetDirectURL(workerName);
  return `http://${u.hostname}:${u.port}`;
}
