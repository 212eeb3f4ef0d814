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
});
