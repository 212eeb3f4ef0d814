/**
 * The dashboard in real Chromium when a poll gets no answer at all (a hung proxy, a wedged path to
 * the hub): the live loop runs one refresh at a time, so a request that never ended held it for
 * good, and the page went on saying "Live · updated <time>" over data that no longer moved. A
 * poll now gives up after POLL_TIMEOUT_MS (15 s): the page says the hub did not answer, marks
 * what it shows stale, and comes back by itself once answers do.
 */
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('the dashboard when a poll is never answered', () => {
  it('says the hub did not answer and marks the view stale within the poll timeout, then goes live again by itself', async () => {
    const c = await h.newCluster('hung');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors);
    await page.getByRole('rowheader', { name: c.name, exact: true }).waitFor({ timeout: 20_000 });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 10_000 }).toMatch(/^Live · updated /);
    // Every fleet read from here on hangs: the request is taken and never answered.
    await page.route((u) => u.pathname === '/admin/fleet', () => undefined);
    const hungAt = Date.now();
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 25_000, interval: 250 }).toMatch(/^Hub unreachable \(no answer in 15 s\), retrying · showing data as of /);
    const tookMs = Date.now() - hungAt;
    expect(tookMs, 'the hang is noticed at the poll timeout, not before').toBeGreaterThanOrEqual(13_000);
    expect(await page.locator('#view').getAttribute('class')).toContain('stale');
    // Answers again: the next poll goes through, and the page is live without a reload.
    await page.unrouteAll({ behavior: 'ignoreErrors' });
    await expect.poll(() => page.locator('#live').innerText(), { timeout: 20_000 }).toMatch(/^Live · updated /);
    expect(await page.locator('#view').getAttribute('class')).not.toContain('stale');
    expect(errors).toEqual([]);
  }, 90_000);
});
