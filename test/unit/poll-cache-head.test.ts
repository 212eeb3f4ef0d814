/**
 * HEAD is a read for the poll cache: Hono answers it with the GET handler, so it changes nothing
 * and must neither clear the answers the dashboards share nor void a read in flight. (A monitor
 * probing an admin URL with HEAD every second used to cost every open dashboard its shared
 * answers, as if someone had written.)
 */
import { Hono } from 'hono';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AdminEnv } from '../../src/hub/admin/app';
import { pollCache } from '../../src/hub/admin/poll-cache';

let apps = 0;

/** One read that counts its runs, and a write; each app has its own path (answers are per isolate). */
function app() {
  const path = `/head-${apps++}`;
  let runs = 0;
  let release: () => void = () => undefined;
  let gate: Promise<void> | null = null;
  const a = new Hono<AdminEnv>();
  a.use('*', pollCache);
  a.get(path, async (c) => {
    runs++;
    if (gate) await gate;
    return c.json({ runs });
  });
  a.post('/write', (c) => c.json({ ok: true }));
  const req = (method: string, headers: Record<string, string> = {}) => a.request(`http://hub${path}`, { method, headers });
  return {
    req,
    poll: () => req('GET', { 'cache-control': 'max-age=1' }),
    runs: () => runs,
    hold: () => void (gate = new Promise((r) => (release = r))),
    release: () => {
      gate = null;
      release();
    },
    write: () => a.request('http://hub/write', { method: 'POST' }),
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('pollCache and HEAD', () => {
  it('a HEAD between two polls leaves the shared answer in place', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const t = app();
    expect(await (await t.poll()).json()).toEqual({ runs: 1 });
    const head = await t.req('HEAD', { 'cache-control': 'max-age=1' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    expect(await (await t.poll()).json()).toEqual({ runs: 1 });
    // A HEAD that accepts no old answer runs the handler, and still clears nothing.
    await t.req('HEAD');
    expect(t.runs()).toBe(2);
    const after = await t.poll();
    expect(t.runs()).toBe(2);
    expect(after.headers.get('etag')).toMatch(/^"[0-9a-f]{24}"$/);
  });

  it('a HEAD while a poll is running does not stop that poll being shared', async () => {
    const t = app();
    t.hold();
    const first = t.poll();
    await new Promise((r) => setTimeout(r, 10));
    const head = t.req('HEAD', { 'cache-control': 'max-age=1' }); // joins the poll in flight
    t.release();
    await Promise.all([first, head]);
    expect(await (await t.poll()).json()).toEqual({ runs: 1 });
    expect(t.runs()).toBe(1);
  });

  it('a write still clears them', async () => {
    const t = app();
    await t.poll();
    await t.write();
    expect(await (await t.poll()).json()).toEqual({ runs: 2 });
  });
});
