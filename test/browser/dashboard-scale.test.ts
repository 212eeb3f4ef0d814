/**
 * The dashboard in real Chromium against the hub in real workerd and real Postgres, with a fleet
 * and a cluster larger than the page reads: it once stopped at 20 pages of 100 clusters and at
 * 2,000 GPUs of a cluster, and presented what it read as the whole.
 */
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

async function signedIn(hash = ''): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  await page.goto(`${h.hub.url}/`);
  await page.getByLabel('Admin token').fill(h.hub.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (hash) await page.goto(`${h.hub.url}/${hash}`);
  return page;
}

describe('the dashboard at fleet scale', () => {
  it('the cluster view counts every GPU of a cluster with more than 2,000 of them, and says its list is cut', async () => {
    const c = await h.newCluster('big');
    await h.sql(
      `insert into devices (cluster_uid, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq)
       select $1, 'GPU-' || lpad(i::text, 5, '0'), 'node-' || (i / 8), 'nvidia', 'H100', 81559, 'healthy', '550', 's', i
       from generate_series(1, 2001) i`,
      [c.uid],
    );
    const page = await signedIn(`#/clusters/${c.name}`);
    // The hub itself knows: the fleet row of the cluster.
    const fleet = await h.admin('GET', '/fleet?limit=500');
    expect(fleet.json.items.find((i: any) => i.uid === c.uid).gpus).toBe(2001);
    const heading = page.getByRole('heading', { level: 3, name: /^GPUs \(/ });
    await heading.waitFor({ timeout: 20_000 });
    await expect.poll(() => heading.innerText(), { timeout: 20_000 }).toMatch(/^GPUs \(\d+\)$/);
    expect(await heading.innerText()).toBe('GPUs (2001)');
    expect(await page.getByRole('region', { name: 'GPUs' }).innerText()).toContain('Listing the first 2000 of 2001.');
  }, 60_000);

  it('the fleet view reads every cluster of a fleet of more than 2,000, counts them as the totals do, and draws its rows 500 at a time', async () => {
    await h.sql(
      `insert into clusters (uid, name, token_hash, token_issued_at)
       select '01ZZZZ' || lpad(i::text, 6, '0'), 'zz-many-' || i, decode(md5('zz-many-' || i), 'hex'), now()
       from generate_series(1, 2001) i
       on conflict do nothing`,
    );
    const [row] = await h.sql<{ n: string }>('select count(*) as n from clusters');
    const total = Number(row?.n);
    expect(total).toBeGreaterThan(2000);
    const page = await signedIn();
    const shown = page.getByRole('status').filter({ hasText: 'clusters match' });
    // The first answer may be one the hub cached up to a second before these clusters were
    // inserted (the dashboard accepts answers a second old): the view catches up at a later poll.
    await expect.poll(() => shown.innerText().catch(() => ''), { timeout: 40_000 }).toMatch(new RegExp(`^${total} of ${total} clusters match; the first 500 are drawn`));
    // The totals tile, from the same answer.
    const tile = page.locator('.stat').filter({ hasText: /^\s*\d+\s*clusters\s*$/ });
    expect(await tile.locator('.stat-v').innerText()).toBe(String(total));
    // Every row was rebuilt at each poll: about a second of the page's thread per poll at 10,000.
    const rows = page.locator('table.fleet tbody tr');
    expect(await rows.count()).toBe(500);
    await page.getByRole('button', { name: 'Show 500 more' }).click();
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(1000);
    expect(await shown.innerText()).toMatch(/the first 1000 are drawn/);
    // A filter starts again from the first page of rows.
    await page.locator('#filter-name').fill('zz-many-1');
    await expect.poll(() => page.getByRole('status').filter({ hasText: /clusters (match|shown)/ }).innerText(), { timeout: 10_000 }).toMatch(/^1111 of \d+ clusters match; the first 500 are drawn/);
  }, 120_000);
});
