/**
 * A hostile operator (or anyone holding one cluster's enrollment token) names each GPU it reports
 * with a model of its own choosing, and the hub counts GPUs by model without a bound, in the
 * fleet totals and in that cluster's row (GET /admin/fleet) and counts (GET /admin/clusters/{id}).
 * The dashboard drew one bar per model and took the longest with `Math.max(...counts)`, which
 * overflows the stack past about 125,000 arguments: every refresh failed, and the administrator
 * lost the whole fleet view (every cluster, not only the hostile one) behind "retrying".
 *
 * The hub's answer is the one it gives for such a cluster, grown here in the page's network layer:
 * storing 140,000 GPUs takes the test database longer than the test's 1.5 s statement deadline
 * allows the fleet read (a real hub waits 10 s).
 */
import type { Browser, Page, Route } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { launchBrowser } from './support/stack';

const h = useHub();
let browser: Browser;
const MODELS = 140_000;
const models = Array.from({ length: MODELS }, (_, i) => ({ model: `model-${i}`, count: 1, unhealthy: 0 }));

beforeAll(async () => {
  browser = await launchBrowser();
}, 120_000);
afterAll(async () => {
  await browser?.close();
});

/** The hub's answer as it is when `hostileUid`'s operator reported MODELS models. */
async function withHostileModels(route: Route, hostileUid: string): Promise<void> {
  let res;
  try {
    res = await route.fetch();
  } catch {
    // The page polls until its test ends: an answer still in flight when the page closes.
    return;
  }
  if (res.status() !== 200) return route.fulfill({ response: res });
  const body = await res.json();
  if (body.totals) body.totals.gpus_by_model = models;
  for (const item of body.items ?? []) if (item.uid === hostileUid) item.gpus_by_model = models;
  if (body.uid === hostileUid && body.counts) body.counts.gpus_by_model = models;
  return route.fulfill({ response: res, json: body });
}

const pages: Page[] = [];
afterEach(async () => {
  // The page keeps polling; its routes must not be answering when the browser closes. (Its
  // context stays open: with the packaged Chromium's single process, closing one ends the browser.)
  for (const page of pages.splice(0)) await page.unrouteAll({ behavior: 'ignoreErrors' });
});

async function signedIn(errors: string[], hostileUid: string, hash = ''): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  pages.push(page);
  page.on('pageerror', (e) => errors.push(e.message));
  await page.route((u) => u.pathname === '/admin/fleet' || /^\/admin\/clusters\/[^/]+$/.test(u.pathname), (r) => withHostileModels(r, hostileUid));
  await page.goto(`${h.hub.url}/`);
  await page.getByLabel('Admin token').fill(h.hub.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (hash) await page.goto(`${h.hub.url}/${hash}`);
  return page;
}

describe('a cluster whose operator reports a GPU model per GPU', () => {
  it('the fleet view still shows every cluster, live, with a bounded chart', async () => {
    const honest = await h.newCluster('honest');
    const hostile = await h.newCluster('hostile');
    const errors: string[] = [];
    const page = await signedIn(errors, hostile.uid);
    const shown = page.getByRole('status').filter({ hasText: 'clusters shown' });
    await expect.poll(() => shown.innerText().catch(() => ''), { timeout: 30_000 }).toMatch(/^(\d+) of \1 clusters shown$/);
    await page.getByRole('rowheader', { name: honest.name, exact: true }).waitFor({ timeout: 10_000 });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live/);
    await expect.poll(() => page.getByRole('img', { name: /^GPUs by model across the fleet: / }).count(), { timeout: 10_000 }).toBe(1);
    expect(await page.locator('figure.chart svg g').count()).toBeLessThanOrEqual(12);
    expect(errors).toEqual([]);
  }, 60_000);

  it("the hostile cluster's own view still shows it, live", async () => {
    const hostile = await h.newCluster('hostile');
    const errors: string[] = [];
    const page = await signedIn(errors, hostile.uid, `#/clusters/${hostile.name}`);
    await page.getByRole('img', { name: /^GPUs by model on / }).waitFor({ timeout: 30_000 });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live/);
    expect(errors).toEqual([]);
  }, 60_000);
});
