/**
 * The fleet dashboard in a real browser (headless Chromium) against `npm start -- --sim`: sign in,
 * see the demo cluster and its GPUs, put a deployment through the form, disable the cluster,
 * and the failure paths (a wrong token, a token that stops working). The README's screenshots
 * are taken here on every run (into .wrangler/screenshots/, untracked); with
 * UPDATE_SCREENSHOTS=1 they are written to docs/screenshots/ too, for a commit.
 */
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, onTestFailed } from 'vitest';
import { tmpdir } from 'node:os';
import { pickDatabaseUrlForTests } from '../../scripts/lib/dev-stack';
import { launchBrowser, startStack, type Stack } from './support/stack';

const SHOTS = fileURLToPath(
  new URL(process.env.UPDATE_SCREENSHOTS === '1' ? '../../docs/screenshots/' : '../../.wrangler/screenshots/', import.meta.url),
);
const BUDGET_BYTES = 150 * 1024;
/** Generous bounds for things that happen in about a second; only a hang should reach them. */
const SETTLE_MS = 20_000;

let stack: Stack;
let browser: Browser;
const contexts: BrowserContext[] = [];
const pageErrors: string[] = [];
/** What Chromium refused under the page's Content-Security-Policy: nothing the dashboard does may meet it. */
const cspViolations: string[] = [];

/** Patterns for a state badge: "disconnected" must not pass for "connected". */
const CONNECTED = /(^|\s)connected(\s|$)/;

const textOf = async (loc: Locator): Promise<string> => ((await loc.count()) > 0 ? loc.first().innerText() : '');
/** Waits until the first element of `loc` has text matching `expected` (a substring or a pattern). */
const waitText = (loc: Locator, expected: string | RegExp, timeout = SETTLE_MS) =>
  expect.poll(() => textOf(loc), { timeout, interval: 100 }).toMatch(expected);
const waitNoText = (loc: Locator, unexpected: string | RegExp, timeout = SETTLE_MS) =>
  expect.poll(() => textOf(loc), { timeout, interval: 100 }).not.toMatch(unexpected);
const waitCount = (loc: Locator, n: number, timeout = SETTLE_MS) => expect.poll(() => loc.count(), { timeout, interval: 100 }).toBe(n);
const visible = (loc: Locator, timeout = SETTLE_MS) => loc.first().waitFor({ state: 'visible', timeout });
const attr = (loc: Locator, name: string) => expect.poll(() => loc.getAttribute(name), { timeout: SETTLE_MS, interval: 100 });

beforeAll(async () => {
  [stack, browser] = await Promise.all([
    startStack({
      // The same server as the run's database, reached through the same maintenance database
      // as every run's global setup: the lease that keeps a stale-database reaper off a live
      // database is an advisory lock, and those are per database.
      serverUrl: inject('embeddedPostgres') ? undefined : await pickDatabaseUrlForTests(),
      // A disabled cluster's session is cut at its next ownership poll.
      vars: { POLL_INTERVAL_MS: '1000' },
    }),
    launchBrowser(),
  ]);
  await mkdir(SHOTS, { recursive: true });
}, 120_000);

afterEach(() => {
  expect(pageErrors.splice(0), 'uncaught errors in the page').toEqual([]);
  expect(cspViolations.splice(0), 'Content Security Policy violations in the page').toEqual([]);
});

afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => undefined);
  await browser?.close();
  await stack?.stop();
}, 60_000);

/** @param watchPolicy false only for a page meant to meet a violation (the injection test). */
async function newPage(viewport = { width: 1280, height: 800 }, watchPolicy = true): Promise<Page> {
  const context = await browser.newContext({ viewport });
  contexts.push(context);
  const page = await context.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  // Chromium reports each refusal (a script, style, image, connection, form, frame) on the console.
  if (watchPolicy) {
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
    });
  }
  // What the page showed when a test failed, for whoever reads the failure.
  onTestFailed(async () => {
    const file = `${tmpdir()}/wingsmith-browser-failure-${Date.now()}.png`;
    await page.screenshot({ path: file, fullPage: true }).catch(() => undefined);
    console.error(`page at failure: ${file}\n${await page.locator('body').innerText().catch(() => '?')}`);
    console.error(`npm start, last lines:\n${stack.output().split('\n').slice(-40).join('\n')}`);
  });
  return page;
}

async function signIn(page: Page, token: string): Promise<void> {
  await page.goto(`${stack.url}/`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

/** The fleet table's row of the demo cluster. */
const demoRow = (page: Page) => page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'demo', exact: true }) });

describe('fleet dashboard', () => {
  it('serves the page with a strict Content-Security-Policy that blocks inline script', async () => {
    const res = await fetch(`${stack.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = res.headers.get('content-security-policy') ?? '';
    const directives = new Map(
      csp.split(';').map((d) => {
        const [k, ...v] = d.trim().split(/\s+/);
        return [k, v.join(' ')] as const;
      }),
    );
    expect(directives.get('default-src')).toBe("'none'");
    expect(directives.get('script-src')).toBe("'self'");
    expect(directives.get('style-src')).toBe("'self'");
    expect(directives.get('connect-src')).toBe("'self'");
    expect(directives.get('frame-ancestors')).toBe("'none'");
    expect(directives.get('form-action')).toBe("'none'");
    expect(directives.get('base-uri')).toBe("'none'");
    expect(csp).not.toContain('unsafe-');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    // The script and style carry the same headers.
    const js = await fetch(`${stack.url}/dashboard/app.js`);
    expect(js.headers.get('content-type')).toMatch(/javascript/);
    expect(js.headers.get('content-security-policy')).toBe(csp);

    const page = await newPage(undefined, false);
    const violations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    await page.goto(`${stack.url}/`);
    await visible(page.getByLabel('Admin token'));
    // Inline script injected into the page does not run.
    await page.addScriptTag({ content: 'window.__injected = true;' }).catch(() => undefined);
    expect(await page.evaluate('window.__injected')).toBeUndefined();
    expect(violations.join('\n')).toMatch(/Content Security Policy/);
  });

  it('sends a wrong token back to the sign-in form, and a token that stops working too', async () => {
    const page = await newPage();
    await signIn(page, 'wsadm_not_the_token');
    await waitText(page.locator('#signin-error'), 'not accepted');
    await visible(page.getByLabel('Admin token'));
    expect(await page.evaluate('sessionStorage.length')).toBe(0);

    await signIn(page, stack.adminToken);
    await visible(demoRow(page));
    expect(await page.getByLabel('Admin token').isVisible()).toBe(false);
    // The token stops working under the page (as when ADMIN_TOKEN changes): the next poll's 401
    // returns to the sign-in form.
    await page.evaluate(`sessionStorage.setItem('wingsmith.admin-token', 'wsadm_revoked')`);
    await visible(page.getByLabel('Admin token'));
    await waitText(page.getByRole('alert').filter({ hasText: 'token' }), 'not accepted');
  });

  it('signs in and shows the demo cluster connected with the simulator GPUs, within the transfer budget', async () => {
    const page = await newPage();
    // What crossed the wire, as DevTools counts "transferred": headers plus the encoded body.
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Network.enable');
    // A cold first load: earlier tests' pages share the browser's HTTP cache.
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
    const urls = new Map<string, string>();
    const statuses = new Map<string, number>();
    const responses: { url: string; status: number; bytes: number }[] = [];
    cdp.on('Network.requestWillBeSent', (e) => urls.set(e.requestId, e.request.url));
    cdp.on('Network.responseReceived', (e) => statuses.set(e.requestId, e.response.status));
    cdp.on('Network.loadingFinished', (e) =>
      responses.push({ url: urls.get(e.requestId) ?? '?', status: statuses.get(e.requestId) ?? 0, bytes: e.encodedDataLength }),
    );
    await signIn(page, stack.adminToken);
    const row = demoRow(page);
    await waitText(row, CONNECTED);
    // npm start's simulator: 4 nodes of 8 H100s.
    await waitText(row, '32 × H100-SXM5-80GB');
    await waitText(row, '4 / 4');
    // The last frame the hub applied from the simulator (its session object sleeps between frames,
    // so this comes from Postgres), and no refusal of desired state in the last hour.
    await expect.poll(async () => (await row.locator('td[data-label="Last frame"]').textContent())?.trim(), { timeout: 10_000 }).toMatch(/ago|now/);
    expect((await row.locator('td[data-label="Refusals (1 h)"]').textContent())?.trim()).toBe('0');
    await visible(page.getByRole('img', { name: /GPUs by model across the fleet: H100-SXM5-80GB: 32/ }));
    await visible(row.getByRole('img', { name: /demo: connected \d+% of the last 6 h, [1-9]\d* connects?/ }));

    // First load of the fleet view: everything transferred up to here (page, script, style, API).
    const firstLoad = [...responses];
    const total = firstLoad.reduce((sum, r) => sum + r.bytes, 0);
    console.log(firstLoad.map((r) => `${r.status} ${new URL(r.url).pathname} ${r.bytes}`).join('\n'));
    expect(firstLoad.filter((r) => r.url.includes('/dashboard/') || new URL(r.url).pathname === '/').map((r) => r.status)).not.toContain(304);
    console.log(`[dashboard] first load of the fleet view: ${firstLoad.length} responses, ${total} bytes transferred`);
    expect(firstLoad.map((r) => new URL(r.url).pathname)).toEqual(expect.arrayContaining(['/', '/dashboard/app.js', '/dashboard/app.css', '/admin/fleet']));
    expect(total).toBeLessThanOrEqual(BUDGET_BYTES);
    // Nothing from another origin; the token is in session storage, not in a URL or a cookie.
    for (const r of responses) expect(new URL(r.url).origin).toBe(stack.url);
    expect(page.url()).not.toContain(stack.adminToken);
    expect(await page.context().cookies()).toEqual([]);
    expect(await page.evaluate(`sessionStorage.getItem('wingsmith.admin-token')`)).toBe(stack.adminToken);
    await page.screenshot({ path: `${SHOTS}fleet.png`, fullPage: true });

    // Readable at phone width: no sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    await visible(row);
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await page.screenshot({ path: `${SHOTS}fleet-phone.png`, fullPage: true });
  });

  it('filters the fleet by state, GPU model and name', async () => {
    const page = await newPage();
    await signIn(page, stack.adminToken);
    await waitText(demoRow(page), CONNECTED);
    const shown = page.getByRole('status').filter({ hasText: 'clusters shown' });
    await page.getByLabel('State', { exact: true }).selectOption('disabled');
    await waitCount(demoRow(page), 0);
    await waitText(shown, '0 of 1 clusters shown');
    await page.getByLabel('State', { exact: true }).selectOption('connected');
    await page.getByLabel('GPU model', { exact: true }).selectOption('H100-SXM5-80GB');
    await waitCount(demoRow(page), 1);
    await page.getByRole('searchbox', { name: 'Name' }).fill('nope');
    await waitCount(demoRow(page), 0);
  });

  it('puts a deployment through the form, showing the API validation message, and watches it become in sync', async () => {
    const page = await newPage();
    await signIn(page, stack.adminToken);
    // By keyboard: tab to the cluster's link and open it.
    const link = page.getByRole('link', { name: 'demo', exact: true });
    await visible(link);
    for (let i = 0; i < 40 && !(await link.evaluate((el) => el === el.ownerDocument.activeElement)); i++) await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await visible(page.getByRole('heading', { level: 2, name: /^demo/ }));

    const form = page.getByRole('form', { name: 'Put a deployment' });
    await form.getByLabel('Deployment id').fill('llama');
    await form.getByLabel('Workload id').fill('llama');
    await form.getByLabel('Min replicas').fill('3');
    await form.getByLabel('Max replicas').fill('2');
    await form.getByLabel('Model', { exact: true }).fill('meta-llama/Llama-3.1-8B');
    await form.getByLabel('Image').fill('vllm/vllm-openai:v0.6.3');
    await form.getByRole('button', { name: 'Put deployment' }).click();
    // The API's own message, next to the field it names.
    await attr(form.getByLabel('Min replicas'), 'aria-invalid').toBe('true');
    await visible(form.getByText('min_replicas: min_replicas exceeds max_replicas'));

    await form.getByLabel('Min replicas').fill('2');
    await form.getByRole('button', { name: 'Put deployment' }).click();
    await attr(form.getByLabel('Min replicas'), 'aria-invalid').toBeNull();
    const row = page.getByRole('row').filter({ has: page.getByRole('button', { name: 'Withdraw llama' }) });
    await waitText(row, 'in sync');
    await waitText(row, '2 ready of 2');
    await waitCount(row.getByRole('button', { name: /^Restart replica / }), 2);
    await waitText(page.getByRole('region', { name: 'Live session' }), 'from the session now');

    // An operation, followed to its result: cordon a node.
    await page.getByRole('button', { name: 'Cordon node node-001' }).click();
    await waitText(page.locator('.follow').filter({ hasText: 'node.cordon node-001' }), 'succeeded');
    await waitText(page.getByRole('row').filter({ hasText: 'node-001' }), 'cordoned');
    await visible(page.getByRole('button', { name: 'Uncordon node node-001' }));
    await waitText(page.getByRole('region', { name: 'Live session' }), 'Handler failures (retried)');
    await waitText(page.getByRole('region', { name: 'Live session' }), 'Progress reports dropped');
    await page.screenshot({ path: `${SHOTS}cluster.png`, fullPage: true });

    // A drain started from the operation form asks first, as the node's Drain button does; cancelled, nothing starts.
    const opForm = page.getByRole('form', { name: 'Start an operation' });
    await opForm.getByLabel('Kind').selectOption('node.drain');
    await opForm.getByLabel('Target (node, replica or model)').fill('node-002');
    await opForm.getByRole('button', { name: 'Start operation' }).click();
    const dialog = page.getByRole('dialog');
    await waitText(dialog, 'Start node.drain on node-002?');
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await page.locator('.follow').filter({ hasText: 'node.drain node-002' }).count()).toBe(0);

    // Readable at phone width too: no sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    await visible(page.getByRole('heading', { level: 2, name: /^demo/ }));
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
  });

  it('an operation whose start lost its answer, started again from the form, runs once: the form resends its Idempotency-Key', async () => {
    const since = Date.now() - 500;
    const page = await newPage();
    await signIn(page, stack.adminToken);
    await page.getByRole('link', { name: 'demo', exact: true }).click();
    await visible(page.getByRole('heading', { level: 2, name: /^demo/ }));
    // The first start reaches the hub, which commits it; its answer never reaches the page.
    let lost = 0;
    await page.route('**/admin/clusters/*/operations', async (route) => {
      if (route.request().method() !== 'POST' || lost > 0) return route.fallback();
      lost++;
      await route.fetch();
      await route.abort('connectionreset');
    });
    const opForm = page.getByRole('form', { name: 'Start an operation' });
    await opForm.getByLabel('Kind').selectOption('node.cordon');
    await opForm.getByLabel('Target (node, replica or model)').fill('node-003');
    await opForm.getByRole('button', { name: 'Start operation' }).click();
    await visible(opForm.getByRole('alert').filter({ hasText: /\S/ }));
    expect(lost).toBe(1);
    await opForm.getByRole('button', { name: 'Start operation' }).click();
    await waitText(page.locator('.follow').filter({ hasText: 'node.cordon node-003' }), 'succeeded');
    const res = await fetch(`${stack.url}/admin/clusters/demo/operations?limit=500`, { headers: { authorization: `Bearer ${stack.adminToken}` } });
    const ops = ((await res.json()) as { items: { kind: string; target: string; created_at: string }[] }).items;
    expect(ops.filter((o) => o.kind === 'node.cordon' && o.target === 'node-003' && Date.parse(o.created_at) >= since)).toHaveLength(1);
  });

  it('a start whose answer was lost does not swallow the same start asked for again after another operation on that target: cordon, uncordon, cordon cordons', async () => {
    const since = Date.now() - 500;
    const page = await newPage();
    await signIn(page, stack.adminToken);
    await page.getByRole('link', { name: 'demo', exact: true }).click();
    await visible(page.getByRole('heading', { level: 2, name: /^demo/ }));
    const nodeRow = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'node-004', exact: true }) });
    await visible(page.getByRole('button', { name: 'Cordon node node-004' }));
    // The first cordon reaches the hub, which commits it and the operator runs it; its answer never reaches the page.
    let lost = 0;
    await page.route('**/admin/clusters/*/operations', async (route) => {
      if (route.request().method() !== 'POST' || lost > 0) return route.fallback();
      lost++;
      await route.fetch();
      await route.abort('connectionreset');
    });
    await page.getByRole('button', { name: 'Cordon node node-004' }).click();
    await waitText(nodeRow, 'cordoned');
    expect(lost).toBe(1);
    // Then the node is uncordoned, and later cordoned again: a new request, not a retry of the first.
    await page.getByRole('button', { name: 'Uncordon node node-004' }).click();
    await waitText(page.locator('.follow').filter({ hasText: 'node.uncordon node-004' }), 'succeeded');
    await waitNoText(nodeRow, 'cordoned');
    await page.getByRole('button', { name: 'Cordon node node-004' }).click();
    await waitText(nodeRow, 'cordoned');
    const res = await fetch(`${stack.url}/admin/clusters/demo/operations?limit=500`, { headers: { authorization: `Bearer ${stack.adminToken}` } });
    const ops = ((await res.json()) as { items: { kind: string; target: string; created_at: string }[] }).items;
    expect(ops.filter((o) => o.kind === 'node.cordon' && o.target === 'node-004' && Date.parse(o.created_at) >= since)).toHaveLength(2);
  });

  it('disables the cluster only after confirmation and watches it disconnect', async () => {
    const page = await newPage();
    await signIn(page, stack.adminToken);
    await page.goto(`${stack.url}/#/clusters/demo`);
    const heading = page.getByRole('heading', { level: 2, name: /^demo/ });
    await waitText(heading, CONNECTED);

    const dialog = page.getByRole('dialog');
    await page.getByRole('button', { name: 'Disable' }).click();
    await waitText(dialog, 'Disable demo?');
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await page.getByRole('button', { name: 'Enable' }).count()).toBe(0);
    await waitText(heading, CONNECTED);

    await page.getByRole('button', { name: 'Disable' }).click();
    await dialog.getByRole('button', { name: 'Disable' }).click();
    await waitText(heading, 'disabled');
    await visible(page.getByRole('button', { name: 'Enable' }));
    const session = page.getByRole('region', { name: 'Live session' });
    await waitText(session.getByRole('definition').first(), /^no$/);
    await visible(page.getByRole('region', { name: 'Connection history' }).getByRole('cell', { name: 'disconnected' }));

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Fleet' }).click();
    await waitText(demoRow(page), 'disabled');
    await waitNoText(demoRow(page), 'still connected');

    await page.goto(`${stack.url}/#/clusters/demo`);
    await page.getByRole('button', { name: 'Enable' }).click();
    await visible(page.getByRole('button', { name: 'Disable' }));
  });

  it('registers a cluster, shows its enrollment token once with a copy button and the command, and rotates it after confirmation', async () => {
    const page = await newPage();
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.url });
    await signIn(page, stack.adminToken);
    const form = page.getByRole('form', { name: 'Register a cluster' });
    await form.getByLabel('Name').fill('gpu-east-1');
    await form.getByRole('button', { name: 'Register' }).click();
    const secret = page.getByRole('region', { name: 'Enrollment token for gpu-east-1' });
    await visible(secret);
    const token = await secret.locator('code.token').innerText();
    expect(token).toMatch(/^wsmet_[A-Za-z0-9]{49}$/);
    await waitText(secret, `npm run sim -- --hub ${stack.url} --token ${token} --cluster gpu-east-1`);
    // Copy: to the clipboard where the browser allows it (headless shell does not), else the
    // token is selected for the user to copy.
    await secret.getByRole('button', { name: 'Copy token' }).click();
    await waitText(page.locator('#notice'), /copied to the clipboard|is selected/);
    const copied = /copied/.test(await page.locator('#notice').innerText())
      ? await page.evaluate('navigator.clipboard.readText()')
      : await page.evaluate('String(getSelection())');
    expect(copied).toBe(token);
    await visible(page.getByRole('link', { name: 'gpu-east-1', exact: true }));

    // The same name again: the API's 409 message, on the field.
    await form.getByLabel('Name').fill('gpu-east-1');
    await form.getByRole('button', { name: 'Register' }).click();
    await waitText(form, 'a cluster named gpu-east-1 already exists');

    await page.getByRole('link', { name: 'gpu-east-1', exact: true }).click();
    await page.getByRole('button', { name: 'Rotate token' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Rotate token' }).click();
    const rotated = page.getByRole('region', { name: 'New enrollment token for gpu-east-1' });
    await visible(rotated);
    const next = await rotated.locator('code.token').innerText();
    expect(next).toMatch(/^wsmet_/);
    expect(next).not.toBe(token);
  });
});
