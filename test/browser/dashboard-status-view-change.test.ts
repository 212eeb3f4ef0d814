/**
 * The status line speaks for the view on screen. A fleet refresh still running when a cluster was
 * opened set "Live · updated …" once it ended, for the cluster view that had loaded nothing yet;
 * and if that view's first refresh then failed, the line said "showing data as of" a time at
 * which nothing of it had been shown (found by review; fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('the status line across a change of view', () => {
  it('does not call a cluster view live, or date its data, on the strength of the fleet refresh that was running when it opened', async () => {
    const c = await h.newCluster('status-view');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors);
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 20_000 }).toMatch(/^Live · updated /);
    // The next fleet refresh hangs until released; the cluster's own reads answer 503.
    let releaseFleet: () => void = () => undefined;
    const fleetHeld = new Promise<void>((r) => (releaseFleet = r));
    let held = 0;
    await page.route(
      (u) => u.pathname === '/admin/fleet',
      async (route) => {
        held++;
        await fleetHeld;
        await route.continue();
      },
    );
    await page.route(
      (u) => u.pathname.startsWith(`/admin/clusters/${c.name}`),
      (route) => route.fulfill({ status: 503, contentType: 'application/json', headers: { 'retry-after': '5' }, body: JSON.stringify({ error: { code: 'unavailable', message: 'database unavailable' } }) }),
    );
    await expect.poll(() => held, { timeout: 10_000 }).toBeGreaterThan(0);
    await page.evaluate((name) => ((globalThis as unknown as { location: { hash: string } }).location.hash = `#/clusters/${name}`), c.name);
    // The cluster view's first refresh waits for the fleet's to end; the fleet's answer then
    // vouches for nothing on screen.
    await new Promise((r) => setTimeout(r, 300));
    releaseFleet();
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Database unavailable/);
    const live = await page.locator('#live').innerText();
    expect(live, 'nothing of the cluster view was ever shown: no data to date').not.toMatch(/as of/);
    await page.unrouteAll({ behavior: 'ignoreErrors' });
  }, 60_000);
});
