import { Hono } from 'hono';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AdminEnv } from '../../src/hub/admin/app';
import { acceptableAgeMs, pollCache } from '../../src/hub/admin/poll-cache';

let apps = 0;

/**
 * An admin-like app whose one read counts how often it really ran. Shared answers live at module
 * level (one set per isolate, as in the Worker), so each app serves its own path.
 */
function app() {
  const path = `/thing-${apps++}`;
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
  a.post('/other', (c) => c.json({ ok: true }));
  return {
    a,
    path,
    runs: () => runs,
    hold() {
      gate = new Promise((r) => (release = r));
    },
    release() {
      gate = null;
      release();
    },
  };
}

/**
 * A read whose statement sees the state as it is when it starts (as a Postgres statement does)
 * and finishes later, and a write that changes that state: the race a dashboard poll runs
 * against the user's own action.
 */
function writeRace() {
  const path = `/race-${apps++}`;
  let state = 'before-write';
  let release: () => void = () => undefined;
  let gate: Promise<void> | null = null;
  const a = new Hono<AdminEnv>();
  a.use('*', pollCache);
  a.get(path, async (c) => {
    const seen = state; // the statement's snapshot
    if (gate) await gate;
    return c.json({ state: seen });
  });
  a.post('/write', (c) => {
    state = 'after-write';
    return c.json({ ok: true });
  });
  return {
    poll: () => a.request(`http://hub${path}`, { headers: { 'cache-control': 'max-age=1' } }),
    write: () => a.request('http://hub/write', { method: 'POST' }),
    hold: () => void (gate = new Promise((r) => (release = r))),
    release: () => {
      gate = null;
      release();
    },
  };
}

const tick = () => new Promise((r) => setTimeout(r, 10));

const get = (t: { a: Hono<AdminEnv>; path: string }, headers: Record<string, string> = {}) => t.a.request(`http://hub${t.path}`, { headers });

afterEach(() => {
  vi.useRealTimers();
});

describe('acceptableAgeMs', () => {
  it('reads max-age in seconds, caps it at 500 ms, and honours no-cache', () => {
    expect(acceptableAgeMs(undefined)).toBe(0);
    expect(acceptableAgeMs('max-age=0')).toBe(0);
    expect(acceptableAgeMs('max-age=1')).toBe(500);
    expect(acceptableAgeMs('private, max-age=60')).toBe(500);
    expect(acceptableAgeMs('no-cache, max-age=1')).toBe(0);
    expect(acceptableAgeMs('garbage')).toBe(0);
  });
});

describe('pollCache', () => {
  it('runs the handler for every request that does not accept an old answer', async () => {
    const t = app();
    for (let i = 1; i <= 3; i++) expect(await (await get(t)).json()).toEqual({ runs: i });
    expect(t.runs()).toBe(3);
  });

  it('shares one run between concurrent pollers of a URL, and serves it while it is young', async () => {
    const t = app();
    t.hold();
    const pending = Array.from({ length: 20 }, () => get(t, { 'cache-control': 'max-age=1' }));
    await new Promise((r) => setTimeout(r, 10));
    t.release();
    const answers = await Promise.all(pending);
    const bodies = await Promise.all(answers.map((r) => r.json()));
    expect(t.runs()).toBe(1);
    expect(new Set(bodies.map((b) => JSON.stringify(b)))).toEqual(new Set(['{"runs":1}']));
    expect(new Set(answers.map((r) => r.headers.get('etag'))).size).toBe(1);
    // Still young: served without running again.
    expect(await (await get(t, { 'cache-control': 'max-age=1' })).json()).toEqual({ runs: 1 });
    expect(t.runs()).toBe(1);
  });

  it('runs again once the shared answer is older than 500 ms', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const t = app();
    await get(t, { 'cache-control': 'max-age=1' });
    vi.setSystemTime(Date.now() + 400);
    await get(t, { 'cache-control': 'max-age=1' });
    expect(t.runs()).toBe(1);
    vi.setSystemTime(Date.now() + 200);
    expect(await (await get(t, { 'cache-control': 'max-age=1' })).json()).toEqual({ runs: 2 });
  });

  it('answers 304 with no body to a matching If-None-Match, and 200 with the body otherwise', async () => {
    const t = app();
    const first = await get(t, { 'cache-control': 'max-age=1' });
    const etag = first.headers.get('etag') ?? '';
    expect(etag).toMatch(/^"[0-9a-f]{24}"$/);
    const same = await get(t, { 'cache-control': 'max-age=1', 'if-none-match': `W/${etag}` });
    expect(same.status).toBe(304);
    expect(await same.text()).toBe('');
    const stale = await get(t, { 'if-none-match': '"00"' });
    expect(stale.status).toBe(200);
    expect(await stale.json()).toEqual({ runs: 2 });
  });

  it('forgets every shared answer when a write comes through', async () => {
    const t = app();
    await get(t, { 'cache-control': 'max-age=1' });
    // Any write, to any path, clears them: the dashboard sees its own action on the next poll.
    await t.a.request('http://hub/other', { method: 'POST' });
    expect(await (await get(t, { 'cache-control': 'max-age=1' })).json()).toEqual({ runs: 2 });
  });

  it('never hands a poll that starts after a write the answer of a read that started before it', async () => {
    const t = writeRace();
    t.hold();
    const inFlight = t.poll(); // a dashboard poll already running when the user clicks
    await tick();
    expect((await t.write()).status).toBe(200);
    const next = t.poll(); // the next poll, after the write completed, while that read still runs
    await tick();
    t.release();
    expect(await (await inFlight).json()).toEqual({ state: 'before-write' }); // right: it began before
    expect(await (await next).json()).toEqual({ state: 'after-write' });
  });

  it('does not keep the answer of a read that a write overtook as a fresh shared answer', async () => {
    const t = writeRace();
    t.hold();
    const inFlight = t.poll();
    await tick();
    expect((await t.write()).status).toBe(200);
    t.release();
    expect(await (await inFlight).json()).toEqual({ state: 'before-write' });
    // Well within 500 ms of that read finishing, the next poll still gets the state after the write.
    expect(await (await t.poll()).json()).toEqual({ state: 'after-write' });
  });

  it('dates a shared answer from when its read began, the state it describes', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const t = app();
    t.hold();
    const slow = get(t, { 'cache-control': 'max-age=1' });
    await tick();
    vi.setSystemTime(Date.now() + 400); // the read takes 400 ms
    t.release();
    await slow;
    vi.setSystemTime(Date.now() + 200); // 600 ms after it began, 200 ms after it finished
    expect(await (await get(t, { 'cache-control': 'max-age=1' })).json()).toEqual({ runs: 2 });
  });

  it('does not hand a poll the answer of a read in flight that began longer ago than the poll accepts: that answer describes the state when it began', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    let state = 'old';
    let calls = 0;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const a = new Hono<AdminEnv>();
    a.use('*', pollCache);
    a.get('/review-reads-slow', async (c) => {
      const seen = state; // the statement's snapshot, taken when it starts
      calls++;
      if (calls === 1) await gate; // only the first read is slow
      return c.json({ state: seen });
    });
    const poll = () => a.request('http://hub/review-reads-slow', { headers: { 'cache-control': 'max-age=1' } });

    const first = poll();
    await new Promise((r) => setTimeout(r, 10));
    vi.setSystemTime(Date.now() + 2_000); // that read has now run for 2 s
    state = 'new'; // the operator's frames changed the state meanwhile
    const second = poll(); // accepts an answer at most 500 ms old
    await new Promise((r) => setTimeout(r, 10));
    release();
    expect(await (await first).json()).toEqual({ state: 'old' }); // right for the first: it began then
    expect(await (await second).json()).toEqual({ state: 'new' });
  });
});

// Found by a review: every 200 answer was kept for the half second, also those of requests that
// never share (no max-age), and with no bound on their bytes; a script walking pages of a few
// MiB each held them all in an isolate of 128 MiB.
describe('pollCache: what it keeps', () => {
  function sized(bytes: number) {
    const path = `/sized-${apps++}`;
    let runs = 0;
    const a = new Hono<AdminEnv>();
    a.use('*', pollCache);
    a.get('/sized-*', (c) => {
      runs++;
      return c.json({ runs, pad: 'x'.repeat(bytes) });
    });
    const poll = (p = path) => a.request(`http://hub${p}`, { headers: { 'cache-control': 'max-age=1' } });
    return { a, path, poll, runs: () => runs };
  }

  it('keeps nothing from a request that does not share: a poller after it runs the read', async () => {
    const t = app();
    await get(t);
    await get(t, { 'cache-control': 'max-age=1' });
    expect(t.runs()).toBe(2);
  });

  it('does not keep an answer over 1 MiB, nor past 16 MiB in all: pollers then run the read', async () => {
    // The clock stands still: every answer stays young, so what is not served was not kept (a
    // loaded machine took over 500 ms for these requests, and the first answers aged out).
    vi.useFakeTimers({ toFake: ['Date'] });
    const big = sized(1_100_000);
    await big.poll();
    await big.poll();
    expect(big.runs()).toBe(2);

    const page = sized(900_000);
    const paths = Array.from({ length: 20 }, (_, i) => `${page.path}-${i}`);
    for (const p of paths) await page.poll(p);
    expect(page.runs()).toBe(20);
    // The first ones are kept (and served), the last ones found the 16 MiB taken.
    await page.poll(paths[0]);
    expect(page.runs()).toBe(20);
    await page.poll(paths[19]);
    expect(page.runs()).toBe(21);
  });
});

describe('a shared read that fails', () => {
  // Found by review: the pollers that joined a read which then failed (a 503 while Postgres is
  // stalled) each ran a read of their own, all at once, after waiting out the first: N statements
  // against the struggling database instead of one, and twice the wait for every joiner.
  it('gives its failure to the polls that joined it, at once, instead of each running its own read', async () => {
    const path = `/failing-${apps++}`;
    let runs = 0;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const a = new Hono<AdminEnv>();
    a.use('*', pollCache);
    a.get(path, async (c) => {
      runs++;
      await gate;
      c.header('retry-after', '5');
      return c.json({ error: { code: 'unavailable', message: 'database unavailable' } }, 503);
    });
    const poll = () => a.request(`http://hub${path}`, { headers: { 'cache-control': 'max-age=1' } });
    const first = poll();
    await tick();
    const joined = poll();
    await tick();
    release();
    const [r1, r2] = await Promise.all([first, joined]);
    expect(runs).toBe(1);
    for (const r of [r1, r2]) {
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBe('5');
      expect(await r.json()).toEqual({ error: { code: 'unavailable', message: 'database unavailable' } });
    }
    // A failure is not kept for later polls: the next one reads again.
    expect((await poll()).status).toBe(503);
    expect(runs).toBe(2);
  });
});
