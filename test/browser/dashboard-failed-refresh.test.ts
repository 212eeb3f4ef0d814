/**
 * A list read during a refresh that failed part way is drawn at the next refresh that succeeds.
 * The poll memo kept that answer and its ETag, so every later poll answered 304 ("unchanged") and
 * the cluster view kept the older table for good, under a "Live" status, and its Edit button the
 * older configuration (found by review; the test fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { desired, useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('a refresh that fails part way', () => {
  it('the deployments table shows the answer read during the failure once refreshes succeed again', async () => {
    const c = await h.newCluster('failed-refresh');
    expect((await h.admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired({ workload_id: 'w1' }))).status).toBe(200);
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    const deps = page.getByRole('region', { name: 'Deployments', exact: true });
    await expect.poll(() => deps.innerText().catch(() => ''), { timeout: 30_000 }).toContain('w1 · rev 1');
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live · updated /);

    // One of the view's other reads fails (a dropped request) while the deployment changes: the
    // refresh reads the new deployments answer, then throws before drawing it.
    await page.route((u) => u.pathname.endsWith('/rejections'), (r) => r.abort());
    expect((await h.admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired({ workload_id: 'w2' }))).status).toBe(200);
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 15_000 }).toMatch(/^Hub unreachable/);
    await page.unrouteAll({ behavior: 'ignoreErrors' });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 20_000 }).toMatch(/^Live · updated /);
    await expect.poll(() => deps.innerText(), { timeout: 10_000 }).toContain('w2 · rev 2');
  }, 120_000);
});
