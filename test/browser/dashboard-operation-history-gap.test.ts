/**
 * A followed operation with a long history: the hub answers its first and latest 100 progress
 * entries and counts those left out between them (`history_omitted`). The cluster view says where
 * they are missing and numbers the latest ones as they are; it drew the 200 as one unbroken list
 * (found by review; the test fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe("a followed operation's long history", () => {
  it('shows the first and latest entries with the count left out between them, numbered as the hub numbers them', async () => {
    const c = await h.newCluster('op-history-gap');
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 3600 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const id = r.json.operation_id as string;
    await h.sql(
      `insert into operation_events (operation_id, frame_id, kind, phase, message, at, session_id, seq)
       select $1, 'f-' || lpad(g::text, 6, '0'), 'progress', 'step-' || g, 'entry ' || g,
         now() - interval '1 hour' + make_interval(secs => g), 's', g
       from generate_series(1, 250) g`,
      [id],
    );
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    const follow = page.locator('.follow').filter({ hasText: 'node.drain n-1' });
    await expect.poll(() => follow.innerText().catch(() => ''), { timeout: 30_000 }).toContain('50 entries not shown');
    const items = follow.locator('ol.history > li');
    expect(await items.count()).toBe(201);
    expect(await items.nth(99).innerText()).toContain('entry 100');
    expect(await items.nth(100).getAttribute('class')).toBe('history-gap');
    expect(await items.nth(101).innerText()).toContain('entry 151');
    expect(await items.nth(101).getAttribute('value')).toBe('151');
    expect(errors).toEqual([]);
  }, 90_000);

  it('past the count the hub keeps, says "at least" and leaves the latest entries unnumbered', async () => {
    const c = await h.newCluster('op-history-many');
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-2', params: {}, deadline_s: 3600 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const id = r.json.operation_id as string;
    await h.sql(
      `insert into operation_events (operation_id, frame_id, kind, phase, message, at, session_id, seq)
       select $1, 'f-' || lpad(g::text, 6, '0'), 'progress', null, 'entry ' || g, now() - interval '5 hours' + make_interval(secs => g), 's', g
       from generate_series(1, 12000) g`,
      [id],
    );
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    const follow = page.locator('.follow').filter({ hasText: 'node.drain n-2' });
    await expect.poll(() => follow.innerText().catch(() => ''), { timeout: 30_000 }).toContain('at least 10000 entries not shown');
    const items = follow.locator('ol.history > li');
    expect(await items.nth(101).innerText()).toContain('entry 11901');
    expect(await items.nth(101).getAttribute('value')).toBeNull();
    expect(await items.nth(101).getAttribute('class')).toBe('unnumbered');
    expect(errors).toEqual([]);
  }, 90_000);
});
