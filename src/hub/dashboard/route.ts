import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { etag } from 'hono/etag';
import { secureHeaders } from 'hono/secure-headers';
import type { HubEnv } from '../env';
import { jsonError } from '../http-errors';
import { FILES, PAGE, type DashboardFile } from './files';

/**
 * The fleet dashboard, served by the Worker itself: `GET /` is the page and `/dashboard/*` its
 * script and style, plain files in ./static bundled into the Worker as text (./files.ts). Not
 * Workers static assets: every answer carries the headers below, so the Worker had to run first
 * for every request anyway, and the assets router that `[assets]` puts in front of the Worker was
 * then paid by every request (the admin API's and the operators' connects included) for ten small
 * files. The page talks only to the public admin API, with the bearer the user signs in with.
 */

/**
 * Nothing the page does not use: its own script, style, images and admin calls only (so injected
 * markup can neither run script nor send the token elsewhere), no inline script or style at all
 * (the page has none, nor any `style=` attribute), no form that navigates (each is handled by
 * script, or is the dialog's `method="dialog"`, which navigates nowhere), no framing, no `<base>`
 * games. `img-src data:` is for the empty favicon only.
 */
export const DASHBOARD_CSP = {
  defaultSrc: ["'none'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  imgSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  baseUri: ["'none'"],
  formAction: ["'none'"],
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

const GZIP_RE = /\bgzip\b/i;

function serve(c: Context, file: DashboardFile): Response {
  const headers: Record<string, string> = {
    'content-type': file.type,
    // Small files, changed by a deploy: always revalidate (a 304 costs a round trip, not a download).
    'cache-control': 'no-cache',
    vary: 'accept-encoding',
  };
  // The runtime compresses a body whose response says gzip (so no compression here: it would be
  // done twice). A Worker's request always says "br, gzip" (Cloudflare sets it, and Miniflare's
  // entry does locally); the edge decompresses for a client that takes no gzip, so the test here
  // only matters where nothing set it (a test harness calling the Worker directly).
  if (GZIP_RE.test(c.req.header('accept-encoding') ?? '')) headers['content-encoding'] = 'gzip';
  return c.body(file.body, 200, headers);
}

export function dashboardApp(): Hono<{ Bindings: HubEnv }> {
  const app = new Hono<{ Bindings: HubEnv }>();
  // Per route, not app.use('*'): mounted at '/', a wildcard would also dress every other route.
  // Weak tags: one tag for the file, gzipped or not.
  const dressed = [pageHeaders, etag({ weak: true })] as const;
  app.get('/', ...dressed, (c) => serve(c, PAGE));
  app.get('/dashboard/:file', ...dressed, (c) => {
    const name = c.req.param('file');
    // Only the listed files: a map lookup, so no path ever reaches anything else.
    const found = FILES.get(name);
    return found ? serve(c, found) : jsonError(c, 404, 'not_found', `no dashboard file ${name}`);
  });
  return app;
}
