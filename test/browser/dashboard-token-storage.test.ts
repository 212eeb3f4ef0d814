/**
 * Where the admin token lives in the browser. README, Dashboard, Security: "The admin
 * token is kept in the tab's `sessionStorage` only (never in a URL or a cookie) and sent as the
 * bearer on every call; any `401` clears it". Signed in and walked through the fleet view and a
 * cluster view, the token is in sessionStorage and nowhere else (no localStorage, no cookie, no
 * request URL, no page text), every admin call carries it as the bearer, a second tab (a new
 * browsing context) is not signed in, and signing out leaves nothing behind.
 */
import type { Request } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('the admin token in the browser', () => {
  it('is in this tab\'s sessionStorage only, and sent only as the bearer', async () => {
    const c = await h.newCluster('tokenhome');
    const errors: string[] = [];
    const requests: Request[] = [];
    const page = await signedIn(browser(), h, errors);
    page.on('request', (r) => requests.push(r));
    await page.getByRole('rowheader', { name: c.name, exact: true }).waitFor({ timeout: 30_000 });
    await page.goto(`${h.hub.url}/#/clusters/${c.name}`);
    await page.getByRole('heading', { level: 2, name: c.name }).waitFor({ timeout: 15_000 });
    await new Promise((r) => setTimeout(r, 1_500));
    const token = h.hub.adminToken;
    // A string, as the other browser tests pass theirs: this project's types have no DOM.
    const where = (await page.evaluate(
      '({ session: Object.keys(sessionStorage).map((k) => sessionStorage.getItem(k)), local: localStorage.length, cookie: document.cookie, url: location.href, text: document.documentElement.outerHTML })',
    )) as { session: (string | null)[]; local: number; cookie: string; url: string; text: string };
    expect(where.session).toEqual([token]);
    expect({ local: where.local, cookie: where.cookie, urlHasToken: where.url.includes(token), pageHasToken: where.text.includes(token) }).toEqual({ local: 0, cookie: '', urlHasToken: false, pageHasToken: false });
    const admin = requests.filter((r) => new URL(r.url()).pathname.startsWith('/admin/'));
    expect(admin.length).toBeGreaterThan(3);
    for (const r of requests) expect(r.url().includes(token) || r.url().includes(encodeURIComponent(token)), r.url()).toBe(false);
    for (const r of admin) expect(await r.headerValue('authorization'), r.url()).toBe(`Bearer ${token}`);
    for (const r of requests.filter((r) => !new URL(r.url()).pathname.startsWith('/admin/'))) expect(await r.headerValue('authorization'), r.url()).toBeNull();

    // Another tab of the same browser profile is not signed in.
    const other = await page.context().newPage();
    await other.goto(`${h.hub.url}/`);
    await other.getByLabel('Admin token').waitFor({ timeout: 10_000 });
    expect(await other.evaluate('sessionStorage.length')).toBe(0);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token').waitFor({ timeout: 10_000 });
    expect(await page.evaluate('({ session: sessionStorage.length, local: localStorage.length, cookie: document.cookie })')).toEqual({ session: 0, local: 0, cookie: '' });
    expect(errors).toEqual([]);
  }, 90_000);
});
