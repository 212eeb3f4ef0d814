/**
 * The dashboard in real Chromium during a Postgres outage: the hub (real workerd) reaches the
 * real Postgres through a proxy this file owns, and the test takes it down.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAST_TIMERS } from '../hub/support/hub';
import { useHubBehindProxy } from '../hub/support/proxy-hub';
import { launchBrowser } from './support/stack';

const { h, proxyUp, proxyDown } = useHubBehindProxy({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', HOLE_TIMEOUT_MS: '30000' });
let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await proxyDown();
});

async function signedIn(): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  await page.goto(`${h.hub.url}/`);
  await page.getByLabel('Admin token').fill(h.hub.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  return page;
}

describe('the dashboard during a Postgres outage', () => {
  it('marks the fleet view stale, says the database is unavailable and since when, and keeps its relative times moving', async () => {
    const c = await h.newCluster('out');
    const { peer } = await h.openFresh(c);
    try {
      const page = await signedIn();
      const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: c.name, exact: true }) });
      // "just now" for 5 s: a loaded machine (CI, 2026-12-06) can take longer to sign in and draw the row.
      await expect.poll(() => row.innerText().catch(() => ''), { timeout: 20_000 }).toMatch(/connected since (just now|\d+ s ago)/);
      expect(await page.locator('#live').innerText()).toMatch(/^Live · updated /);
      await proxyDown();
      // The hub answers a typed 503 (sound), and the page notices the failed poll.
      expect(await h.admin('GET', '/fleet')).toMatchObject({ status: 503, json: { error: { code: 'unavailable' } } });
      await expect.poll(() => page.locator('#live').innerText(), { timeout: 20_000 }).toMatch(/retrying/);
      // The hub answered: the database is away, not the hub; and the data on screen is dated.
      const live = await page.locator('#live').innerText();
      // When, too: the hub's 503 says Retry-After 5, and the page waits that long between polls
      // rather than adding one a second per open dashboard to the outage.
      expect(live).toMatch(/^Database unavailable .*retrying in 5 s · showing data as of \d{1,2}:\d{2}:\d{2}/);
      expect(await page.locator('#view').getAttribute('class')).toContain('stale');
      let polls = 0;
      page.on('request', (r) => {
        if (new URL(r.url()).pathname === '/admin/fleet') polls++;
      });
      await new Promise((r) => setTimeout(r, 8_000));
      expect(polls, 'fleet polls in 8 s of an outage answered 503 with Retry-After: 5').toBeLessThanOrEqual(2);
      // Every relative time on the row must say how old it is by now; none may still read "just now".
      const times = await row.locator('time').evaluateAll((els) =>
        els.map((e) => ({ ageMs: Date.now() - Date.parse(e.getAttribute('datetime') ?? ''), text: (e.textContent ?? '').trim() })),
      );
      const old = times.filter((t) => t.ageMs >= 8_000);
      expect(old.length).toBeGreaterThan(0);
      expect(old.map((t) => t.text), `row during the outage: ${await row.innerText()}`).not.toContain('just now');
      // Back: live again, and no longer marked stale.
      await proxyUp();
      await expect.poll(() => page.locator('#live').innerText(), { timeout: 30_000 }).toMatch(/^Live · updated /);
      expect(await page.locator('#view').getAttribute('class')).not.toContain('stale');
    } finally {
      await proxyUp();
      peer.close();
    }
  }, 90_000);
});
