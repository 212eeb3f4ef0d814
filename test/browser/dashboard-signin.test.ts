/** The dashboard's sign-in and routing in real Chromium against the hub in real workerd + Postgres. */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { launchBrowser } from './support/stack';

const h = useHub();
let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
}, 120_000);
afterAll(async () => {
  await browser?.close();
});

async function newPage(errors: string[] = []): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on('pageerror', (e) => errors.push(e.message));
  return page;
}

describe('dashboard sign-in and links', () => {
  it('a wrong token of any shape (a pasted token with a space in it) sends the user back to sign in, with nothing kept', async () => {
    const page = await newPage();
    await page.goto(`${h.hub.url}/`);
    await page.getByLabel('Admin token').fill('test-admin token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await new Promise((r) => setTimeout(r, 3_000));
    const live = await page.locator('#live').innerText();
    expect(
      { signInVisible: await page.getByLabel('Admin token').isVisible(), stored: await page.evaluate('sessionStorage.length') },
      `page status: ${live}`,
    ).toEqual({ signInVisible: true, stored: 0 });
  });

  it('a token no HTTP header can carry is refused at sign-in with a message, not retried as "hub unreachable"', async () => {
    const page = await newPage();
    await page.goto(`${h.hub.url}/`);
    await page.getByLabel('Admin token').fill('tökén€-pasted');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.locator('#signin-error').innerText()).toMatch(/characters an HTTP header cannot carry/);
    expect({ signInVisible: await page.getByLabel('Admin token').isVisible(), stored: await page.evaluate('sessionStorage.length') }).toEqual({ signInVisible: true, stored: 0 });
  });

  it('a malformed cluster link (#/clusters/%E0%A4%A) does not leave a signed-in user with a blank page', async () => {
    const errors: string[] = [];
    const page = await newPage(errors);
    await page.goto(`${h.hub.url}/`);
    await page.getByLabel('Admin token').fill(h.hub.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('status').filter({ hasText: 'clusters shown' }).waitFor({ timeout: 20_000 });
    await page.goto(`${h.hub.url}/#/clusters/%E0%A4%A`);
    await page.reload();
    await new Promise((r) => setTimeout(r, 2_000));
    const main = (await page.locator('#main').innerText()).trim();
    expect({ errors, mainEmpty: main === '' }).toEqual({ errors: [], mainEmpty: false });
    expect(await page.getByRole('heading', { level: 2 }).innerText()).toBe('No cluster named %E0%A4%A');
  });

  it('a cluster link naming a dot segment (#/clusters/. or ..), or an id the admin API refuses (a U+0000, over 253 characters), says no such cluster instead of reading another admin path or retrying a 400 for ever', async () => {
    // fetch() resolves /admin/clusters/. to /admin/clusters/ (the fleet list) and .. to /admin/:
    // the view would read something that is not a cluster. No cluster can be named . or ..
    const errors: string[] = [];
    const page = await newPage(errors);
    const asked: string[] = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname.startsWith('/admin/')) asked.push(new URL(r.url()).pathname);
    });
    await page.goto(`${h.hub.url}/`);
    await page.getByLabel('Admin token').fill(h.hub.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('status').filter({ hasText: 'clusters shown' }).waitFor({ timeout: 20_000 });
    const long = 'a'.repeat(254);
    for (const [link, shown] of [['.', '.'], ['..', '..'], ['%2E', '.'], ['%2e%2E', '..'], ['a%00b', 'a%00b'], [long, long]] as const) {
      asked.length = 0;
      await page.goto(`${h.hub.url}/#/clusters/${link}`);
      await page.reload();
      await new Promise((r) => setTimeout(r, 1_500));
      expect({ link, heading: await page.getByRole('heading', { level: 2 }).innerText(), read: asked.filter((p) => !p.startsWith('/admin/fleet')) }).toEqual({
        link,
        heading: `No cluster named ${shown}`,
        read: [],
      });
    }
    expect(errors).toEqual([]);
  });
});
