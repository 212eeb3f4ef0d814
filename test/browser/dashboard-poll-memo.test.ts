/**
 * The dashboard left open for days (a wall screen): what it remembers between polls must not grow
 * with time while one view stays shown. Its poll memo (api.js: the ETag and answer of each path
 * it polls) was cleared only when the view changed, so a cluster view kept an entry for every
 * operation it had followed while open, each with its whole history, for as long as it was shown
 * (and the answers of the view before it that were still in flight when it opened). It now forgets
 * a path not read for five refreshes, which must still keep the fleet view's cluster list, read
 * every fifth refresh, between its reads.
 *
 * The memo is module state the page does not expose: the test finds it on the page's heap (the
 * Map whose values are `{etag, data, ...}`) through the DevTools protocol.
 */
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

/** The paths the page's poll memo holds (the largest memo-shaped Map on its heap). */
async function memoPaths(page: Page): Promise<string[]> {
  const cdp = await page.context().newCDPSession(page);
  try {
    const proto = await cdp.send('Runtime.evaluate', { expression: 'Map.prototype' });
    const maps = await cdp.send('Runtime.queryObjects', { prototypeObjectId: proto.result.objectId ?? '' });
    const found = await cdp.send('Runtime.callFunctionOn', {
      objectId: maps.objects.objectId ?? '',
      functionDeclaration: `function () {
        const memo = (m) => m.size > 0 && [...m.values()].every((v) => v && typeof v === 'object' && 'etag' in v && 'data' in v);
        const best = this.filter(memo).sort((a, b) => b.size - a.size)[0];
        return best ? [...best.keys()] : [];
      }`,
      returnByValue: true,
    });
    return found.result.value as string[];
  } finally {
    await cdp.detach();
  }
}

describe('a cluster view left open while operations come and go', () => {
  it('forgets the operations it no longer follows: its poll memo holds only what the view still reads', async () => {
    const c = await h.newCluster('wall');
    const page = await signedIn(browser(), h, [], `#/clusters/${c.name}`);
    /** Refreshes of the view (each reads the cluster first) and the operations it followed. */
    let refreshes = 0;
    const followed = new Set<string>();
    page.on('request', (r) => {
      const path = new URL(r.url()).pathname;
      if (path === `/admin/clusters/${c.name}`) refreshes++;
      const op = /^\/admin\/operations\/([^/]+)$/.exec(path)?.[1];
      if (op) followed.add(op);
    });
    await page.getByRole('heading', { level: 2, name: new RegExp(`^${c.name}`) }).waitFor({ timeout: 20_000 });

    // Rounds of operations, each concluded (deadline_exceeded) six seconds after it starts; the
    // view follows the open ones while they are open. (Two seconds was shorter than one refresh
    // of this view can take on a loaded CI machine: a round could conclude unseen.)
    for (let round = 0; round < 4; round++) {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target: `node-${round}-${i}`, params: {}, deadline_s: 6 });
        expect(r.status, JSON.stringify(r.json)).toBe(202);
        ids.push(r.json.operation_id as string);
      }
      await expect.poll(() => ids.some((id) => followed.has(id)), { timeout: 15_000 }).toBe(true);
    }
    expect(followed.size).toBeGreaterThanOrEqual(4);
    // Every operation has concluded; the view reads on, with none of them open any more.
    await expect.poll(async () => (await h.admin('GET', `/clusters/${c.name}/operations?limit=20`)).json.items.filter((o: any) => !['succeeded', 'failed', 'cancelled', 'deadline_exceeded'].includes(o.state)).length, { timeout: 20_000 }).toBe(0);
    const from = refreshes;
    await expect.poll(() => refreshes - from, { timeout: 30_000, interval: 250 }).toBeGreaterThanOrEqual(8);

    const paths = await memoPaths(page);
    expect(paths.length, 'the memo was found on the page').toBeGreaterThan(0);
    expect(paths.filter((p) => p.startsWith('/operations/')), `memo: ${paths.join(' ')}`).toEqual([]);
    // What one refresh of this view reads: the cluster, three one-page lists, four short ones.
    expect(paths.length, `memo: ${paths.join(' ')}`).toBeLessThanOrEqual(8);
  }, 90_000);

  it('the fleet view reads no cluster list from a hub whose fleet summary has all it shows', async () => {
    // Found by review: the list was read every fifth refresh for an older hub's fields this hub's
    // fleet summary carries: each open dashboard walked the whole list every five seconds for nothing.
    const page = await signedIn(browser(), h, []);
    const lists: string[] = [];
    const fleets: string[] = [];
    page.on('request', (r) => {
      const path = new URL(r.url()).pathname;
      if (path === '/admin/clusters') lists.push(r.url());
      if (path === '/admin/fleet') fleets.push(r.url());
    });
    await expect.poll(() => fleets.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(7);
    expect(lists).toEqual([]);
    const paths = await memoPaths(page);
    expect(paths.sort(), `memo: ${paths.join(' ')}`).toEqual(['/fleet?hours=6&limit=500']);
  }, 60_000);

  it("the fleet view of an older hub (no operator version or contention in its summary) keeps reading the cluster list every fifth refresh, with the ETag it kept", async () => {
    const page = await signedIn(browser(), h, []);
    // An older hub's answer: the fleet summary's items without the two fields.
    await page.route('**/admin/fleet?*', async (route) => {
      try {
        const res = await route.fetch({ headers: { ...route.request().headers(), 'if-none-match': '' } });
        const json = (await res.json()) as { items: Record<string, unknown>[] };
        for (const item of json.items) {
          delete item.contention;
          delete item.operator_version;
        }
        await route.fulfill({ response: res, json, headers: { ...res.headers(), etag: `"older-${Date.now()}"` } });
      } catch {
        // The page closed with a poll in flight (the test's end).
      }
    });
    /** Reads of the cluster list, with whether each sent the ETag of the one before. */
    const reads: boolean[] = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/admin/clusters') reads.push(r.headers()['if-none-match'] !== undefined);
    });
    await expect.poll(() => reads.length, { timeout: 20_000 }).toBeGreaterThanOrEqual(1);
    for (let i = 0; reads.length < 3; i++) {
      await h.newCluster('added');
      await new Promise((r) => setTimeout(r, 1_000));
      expect(i, 'the cluster list is read every fifth refresh').toBeLessThan(20);
    }
    expect(reads.slice(1), 'every read after the first sends the ETag it kept').toEqual(reads.slice(1).map(() => true));
    await page.unrouteAll({ behavior: 'ignoreErrors' });
  }, 60_000);
});
