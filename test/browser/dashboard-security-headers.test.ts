/**
 * The dashboard's and the admin API's security headers as Chromium applies them (README,
 * Dashboard, Security): the page works under its strict policy without a single violation, and
 * a page of another origin can frame neither the console nor an admin answer. Against the hub in
 * real workerd + Postgres.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Frame, Page } from 'playwright-core';
import { describe, expect, it, onTestFinished } from 'vitest';
import { useHub } from '../hub/support/hub';
import { useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();
const SETTLE_MS = 20_000;

/**
 * A new page that records every Content Security Policy violation it meets: the DOM event (each
 * blocked script, style, image, connection, form, base) and Chromium's console line for it.
 */
async function watchedPage(errors: string[]): Promise<{ page: Page; violations: string[] }> {
  const page = await (await browser().newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  const violations: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) violations.push(`console: ${m.text()}`);
  });
  // A binding, not script of the page's own: the policy cannot silence the report of itself.
  await page.exposeFunction('__cspViolation', (s: string) => violations.push(`event: ${s}`));
  await page.addInitScript(
    "document.addEventListener('securitypolicyviolation', (e) => window.__cspViolation(`${e.effectiveDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));",
  );
  return { page, violations };
}

describe('the dashboard under its Content-Security-Policy, in Chromium', () => {
  it('signs in, shows the fleet and a cluster, and confirms a Disable without any policy violation', async () => {
    const cluster = await h.newCluster('csp');
    const errors: string[] = [];
    const { page, violations } = await watchedPage(errors);
    await page.goto(`${h.hub.url}/`);
    await page.getByLabel('Admin token').fill(h.hub.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('status').filter({ hasText: 'clusters shown' }).waitFor({ timeout: SETTLE_MS });
    await page.getByRole('rowheader', { name: cluster.name, exact: true }).waitFor({ timeout: SETTLE_MS });

    await page.getByRole('link', { name: cluster.name, exact: true }).click();
    await page.getByRole('heading', { level: 2, name: cluster.name }).waitFor({ timeout: SETTLE_MS });
    const dialog = page.getByRole('dialog');
    // The dialog's buttons submit its `method="dialog"` form: form-action 'none' must not stop them.
    await page.getByRole('button', { name: 'Disable' }).click();
    await dialog.waitFor({ state: 'visible', timeout: SETTLE_MS });
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden', timeout: SETTLE_MS });
    await page.getByRole('button', { name: 'Disable' }).click();
    await dialog.getByRole('button', { name: 'Disable' }).click();
    await page.getByRole('button', { name: 'Enable' }).waitFor({ timeout: SETTLE_MS });
    expect((await h.admin('GET', `/clusters/${cluster.name}`)).json.disabled).toBe(true);
    expect({ violations, errors }).toEqual({ violations: [], errors: [] });

    // The watch itself sees a violation when there is one: inline script injected into the page.
    await page.addScriptTag({ content: 'window.__injected = true;' }).catch(() => undefined);
    expect(await page.evaluate('window.__injected')).toBeUndefined();
    await expect.poll(() => violations.some((v) => v.startsWith('event: script-src-elem blocked inline')), { timeout: SETTLE_MS }).toBe(true);
  });

  it('a page of another origin framing the dashboard or an admin answer gets them refused', async () => {
    const errors: string[] = [];
    const { page } = await watchedPage(errors);
    // Another origin's page (another port: a page on a public address could not frame a loopback
    // one at all, Chromium's local network protection): it frames the console, an admin JSON
    // answer, and (the control: framing itself works here) /healthz, which sets no framing policy.
    const body = ['/', '/admin/openapi.json', '/healthz'].map((p) => `<iframe name="${p}" src="${h.hub.url}${p}"></iframe>`).join('');
    const other = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(body));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => other.close(() => resolve())));
    await page.goto(`http://127.0.0.1:${(other.address() as AddressInfo).port}/`, { waitUntil: 'load' });
    const framed = (name: string): Frame => {
      const f = page.frames().find((x) => x.name() === name);
      if (!f) throw new Error(`no frame ${name}`);
      return f;
    };
    // A refused frame is left with Chromium's error page in place of the hub's.
    const shown = async (name: string) => {
      const f = framed(name);
      return { url: f.url(), text: (await f.locator('body').innerText().catch(() => '')).slice(0, 200) };
    };
    await expect.poll(async () => (await shown('/healthz')).text, { timeout: SETTLE_MS }).toMatch(/"region"/);
    expect((await shown('/healthz')).url).toBe(`${h.hub.url}/healthz`);
    for (const name of ['/', '/admin/openapi.json']) {
      const got = await shown(name);
      expect({ name, hubUrl: got.url.startsWith(h.hub.url), itsContent: /Admin token|openapi/.test(got.text) }).toEqual({ name, hubUrl: false, itsContent: false });
    }
    expect(errors).toEqual([]);
  });
});
