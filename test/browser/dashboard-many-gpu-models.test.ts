/**
 * A hostile operator (or anyone holding one cluster's enrollment token) names each GPU it reports
 * with a model of its own choosing. The dashboard once drew one bar per model and took the longest
 * with `Math.max(...counts)`, which overflows the stack past about 125,000 arguments: every refresh
 * failed, and the administrator lost the whole fleet view (every cluster, not only the hostile
 * one) behind "retrying". The hub now lists at most MAX_GPU_MODELS models and sums the rest, and
 * the chart draws at most 12 bars.
 *
 * Here the hostile operator really reports more models than the hub lists, over the wire, and the
 * page reads the hub's own answers: the chart is bounded and both views stay live.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_GPU_MODELS } from '../../src/hub/db/fleet';
import { device, useHub, type TestCluster } from '../hub/support/hub';
import { launchBrowser } from './support/stack';

const h = useHub();
let browser: Browser;
/** More than the hub lists, so its answers carry a summed rest. */
const MODELS = MAX_GPU_MODELS + 36;

beforeAll(async () => {
  browser = await launchBrowser();
}, 120_000);
afterAll(async () => {
  await browser?.close();
});

/** A cluster whose operator reported MODELS GPUs, each of a model of its own. */
async function hostileCluster(): Promise<TestCluster> {
  const c = await h.newCluster('hostile');
  const { peer } = await h.openFresh(c);
  for (let i = 0; i < MODELS; i++) peer.send('device.observed', device(`GPU-${i}`, { model: `model-${i}` }));
  await peer.ackedThrough(MODELS);
  peer.close();
  const view = await h.admin('GET', `/clusters/${c.name}`);
  expect(view.json.counts.gpus_by_model).toHaveLength(MAX_GPU_MODELS);
  expect(view.json.counts.gpus_other_models.models).toBe(MODELS - MAX_GPU_MODELS);
  return c;
}

async function signedIn(errors: string[], hash = ''): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${h.hub.url}/`);
  await page.getByLabel('Admin token').fill(h.hub.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (hash) await page.goto(`${h.hub.url}/${hash}`);
  return page;
}

describe('a cluster whose operator reports a GPU model per GPU', () => {
  it('the fleet view still shows every cluster, live, with a bounded chart', async () => {
    const honest = await h.newCluster('honest');
    await hostileCluster();
    const errors: string[] = [];
    const page = await signedIn(errors);
    const shown = page.getByRole('status').filter({ hasText: 'clusters shown' });
    await expect.poll(() => shown.innerText().catch(() => ''), { timeout: 30_000 }).toMatch(/^(\d+) of \1 clusters shown$/);
    await page.getByRole('rowheader', { name: honest.name, exact: true }).waitFor({ timeout: 10_000 });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live/);
    // The 11 most numerous models, and one bar for the rest: the hub's unlisted ones with the chart's.
    const rest = MODELS - 11;
    await expect.poll(() => page.getByRole('img', { name: /^GPUs by model across the fleet: / }).count(), { timeout: 10_000 }).toBe(1);
    expect(await page.getByRole('img', { name: /^GPUs by model across the fleet: / }).getAttribute('aria-label')).toContain(`${rest} other models: ${rest}`);
    expect(await page.locator('figure.chart svg g').count()).toBe(12);
    expect(errors).toEqual([]);
  }, 60_000);

  it("the hostile cluster's own view still shows it, live", async () => {
    const hostile = await hostileCluster();
    const errors: string[] = [];
    const page = await signedIn(errors, `#/clusters/${hostile.name}`);
    await page.getByRole('img', { name: /^GPUs by model on / }).waitFor({ timeout: 30_000 });
    expect(await page.locator('figure.chart svg g').count()).toBe(12);
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live/);
    expect(errors).toEqual([]);
  }, 60_000);
});
