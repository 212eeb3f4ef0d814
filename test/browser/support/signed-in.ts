/**
 * A browser for the test file (launched before its tests, closed after) and a page signed in to
 * a hub's dashboard with its admin token, at 1280 × 800, collecting the page's uncaught errors.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import type { HubHandle } from '../../hub/support/hub';
import { launchBrowser } from './stack';

export function useBrowser(): () => Browser {
  let browser: Browser | undefined;
  beforeAll(async () => {
    browser = await launchBrowser();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
  });
  return () => {
    if (!browser) throw new Error('the browser is not launched yet');
    return browser;
  };
}

/** A new page (its context left open: with the packaged Chromium's single process, closing one ends the browser). */
export async function signedIn(browser: Browser, h: HubHandle, errors: string[], hash = ''): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${h.hub.url}/`);
  await page.getByLabel('Admin token').fill(h.hub.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (hash) await page.goto(`${h.hub.url}/${hash}`);
  return page;
}
