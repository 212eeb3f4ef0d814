/**
 * A write the way to the hub never answers (a hung proxy, a wedged path) ends after the write's
 * deadline with a message that says the outcome is unknown, and its form can be used again.
 * Without a deadline the form stayed disabled for good and nothing was said, while the status
 * line went on saying "Live" (found by review; the test fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('a write that is never answered', () => {
  it('Put deployment: after the deadline the form says the outcome is unknown and can be submitted again', async () => {
    const c = await h.newCluster('hung-write');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    await page.locator('#dep-deployment_id').waitFor({ timeout: 30_000 });
    // The PUT is held and never answered; every other request goes through.
    await page.route((u) => u.pathname.includes('/deployments/'), (r) => (r.request().method() === 'PUT' ? undefined : r.continue()));
    await page.locator('#dep-deployment_id').fill('d1');
    await page.locator('#dep-workload_id').fill('w1');
    await page.locator('#dep-model').fill('m');
    await page.locator('#dep-image').fill('img:1');
    const put = page.getByRole('button', { name: 'Put deployment' });
    await put.click();
    await expect.poll(() => put.isDisabled()).toBe(true);
    const form = page.locator('form[aria-labelledby="dep-h"]');
    await expect.poll(() => form.innerText(), { timeout: 40_000 }).toMatch(/no answer in 20 s.*unknown/s);
    expect(await put.isDisabled()).toBe(false);
    expect(await form.getAttribute('aria-busy')).toBeNull();
  }, 90_000);

  it('an operation start whose answer never came keeps its Idempotency-Key: started again, the hub starts it once', async () => {
    const c = await h.newCluster('hung-op');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    const opForm = page.getByRole('form', { name: 'Start an operation' });
    await opForm.getByLabel('Kind').waitFor({ timeout: 30_000 });
    // The first start reaches the hub, which commits it; its answer never reaches the page.
    const keys: string[] = [];
    await page.route('**/admin/clusters/*/operations', async (route) => {
      if (route.request().method() !== 'POST') return route.fallback();
      keys.push(route.request().headers()['idempotency-key'] ?? '');
      if (keys.length === 1) {
        await route.fetch();
        return; // held: never answered
      }
      return route.fallback();
    });
    await opForm.getByLabel('Kind').selectOption('node.cordon');
    await opForm.getByLabel('Target (node, replica or model)').fill('node-001');
    const start = opForm.getByRole('button', { name: 'Start operation' });
    await start.click();
    await expect.poll(() => opForm.innerText(), { timeout: 40_000 }).toMatch(/no answer in 20 s.*unknown/s);
    await start.click();
    await expect.poll(() => keys.length, { timeout: 20_000 }).toBe(2);
    expect(keys[1]).toBe(keys[0]);
    await expect.poll(async () => (await h.admin('GET', `/clusters/${c.name}/operations?limit=10`)).json.items.length, { timeout: 10_000 }).toBe(1);
  }, 120_000);
});
