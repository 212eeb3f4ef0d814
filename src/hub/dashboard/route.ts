import { Hono, type MiddlewareHandler } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import type { HubEnv } from '../env';
import { jsonError } from '../http-errors';

/**
 * The fleet dashboard, served by the Worker itself: `GET /` is the page and `/dashboard/*` its
 * script and style, all plain files in ./static shipped as Workers static assets (wrangler.toml
 * `[assets]`, with `run_worker_first` so every asset answer passes through here and carries the
 * headers below). The page talks only to the public admin API, with the bearer the user signs
 * in with.
 */

export interface DashboardEnv extends HubEnv {
  /** Workers static assets (wrangler.toml [assets]); absent in a configuration without them. */
  ASSETS?: Fetcher;
}

/**
 * No script, style, font or connection from anywhere but this origin, no inline script or style
 * at all (the page has none), no framing, no plugins, no `<base>` games. `img-src data:` is for
 * the empty favicon only.
 */
export const DASHBOARD_CSP = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  imgSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  fontSrc: ["'none'"],
  objectSrc: ["'none'"],
  baseUri: ["'none'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
};

const pageHeaders: MiddlewareHandler = secureHeaders({
  contentSecurityPolicy: DASHBOARD_CSP,
  crossOriginOpenerPolicy: 'same-origin',
  crossOriginResourcePolicy: 'same-origin',
  referrerPolicy: 'no-referrer',
  xFrameOptions: 'DENY',
  permissionsPolicy: { camera: [], microphone: [], geolocation: [] },
});

/** Only these names are served under /dashboard/: nothing else in the assets directory leaks. */
const FILE_RE = /^[a-z][a-z0-9-]*\.(?:js|css)$/;

async function fromAssets(env: DashboardEnv, req: Request, path: string): Promise<Response | null> {
  if (!env.ASSETS) return null;
  // Forward the conditional headers so an unchanged file answers 304.
  const res = await env.ASSETS.fetch(new Request(new URL(path, req.url), { headers: req.headers }));
  if (res.status !== 200 && res.status !== 304) return null;
  const out = new Response(res.body, res);
  // Small files, changed by a deploy: always revalidate (a 304 costs a round trip, not a download).
  out.headers.set('cache-control', 'no-cache');
  return out;
}

export function dashboardApp(): Hono<{ Bindings: DashboardEnv }> {
  const app = new Hono<{ Bindings: DashboardEnv }>();
  // Per route, not app.use('*'): mounted at '/', a wildcard would also dress every other route.
  app.get('/', pageHeaders, async (c) => (await fromAssets(c.env, c.req.raw, '/')) ?? jsonError(c, 503, 'unavailable', 'the dashboard assets are not configured on this hub'));
  app.get('/dashboard/:file', pageHeaders, async (c) => {
    const file = c.req.param('file');
    if (!FILE_RE.test(file)) return jsonError(c, 404, 'not_found', `no dashboard file ${file}`);
    return (await fromAssets(c.env, c.req.raw, `/${file}`)) ?? jsonError(c, 404, 'not_found', `no dashboard file ${file}`);
  });
  return app;
}
