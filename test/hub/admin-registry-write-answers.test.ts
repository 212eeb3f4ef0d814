/**
 * Registry writes of one cluster racing each other (two operators of the plane): a PATCH of the
 * location hint and a disable or enable. Each answer is "the cluster as changed", and must be the
 * cluster as its own write committed it: the two answers together must be those of one order of
 * the two calls. The answer used to be read by a statement after the write's own, so a write
 * queued behind it showed up in it too (the PATCH answered `disabled: true` while the disable
 * answered the PATCH's hint: each saw the other, which no order produces).
 */
import { describe, expect, it } from 'vitest';
import { eventually, FAST_TIMERS, holdLock, useHub, waitingOnLock, type TestCluster } from './support/hub';

const h = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '8000' });

type Call = { method: string; path: (c: TestCluster) => string; body?: unknown };

const patch: Call = { method: 'PATCH', path: (c) => `/clusters/${c.name}`, body: { location_hint: 'weur' } };
const disable: Call = { method: 'POST', path: (c) => `/clusters/${c.name}/disable` };
const enable: Call = { method: 'POST', path: (c) => `/clusters/${c.uid}/enable` };

/** `first` then `second` queue on the cluster's row (held here), in that order; both answers once it is released. */
async function queued(c: TestCluster, first: Call, second: Call) {
  const release = await holdLock('select 1 from clusters where uid = $1 for update', [c.uid]);
  const waiting = () => waitingOnLock(h, '%clusters%');
  const before = await waiting();
  const a = h.admin(first.method, first.path(c), first.body);
  await eventually(async () => (await waiting()) > before);
  const b = h.admin(second.method, second.path(c), second.body);
  await eventually(async () => (await waiting()) > before + 1);
  await release();
  const [ra, rb] = await Promise.all([a, b]);
  expect([ra.status, rb.status]).toEqual([200, 200]);
  return [ra.json, rb.json] as const;
}

describe('a PATCH and a disable or enable of one cluster, racing', () => {
  it('PATCH committed before a disable: it answers enabled, and the disable answers the new hint', async () => {
    const c = await h.newCluster('ar');
    const [p, d] = await queued(c, patch, disable);
    expect({ patch: [p.location_hint, p.disabled, p.disabled_at], disable: [d.location_hint, d.disabled] }).toEqual({
      patch: ['weur', false, null],
      disable: ['weur', true],
    });
  }, 30_000);

  it('disable committed before a PATCH: it answers the hint it found (none), and the PATCH answers disabled', async () => {
    const c = await h.newCluster('ar');
    const [d, p] = await queued(c, disable, patch);
    expect({ disable: [d.location_hint, d.disabled], patch: [p.location_hint, p.disabled, p.disabled_at] }).toEqual({
      disable: [null, true],
      patch: ['weur', true, d.disabled_at],
    });
  }, 30_000);

  it('enable committed before a PATCH: it answers no hint, and the PATCH answers enabled', async () => {
    const c = await h.newCluster('ar');
    expect((await h.admin('POST', `/clusters/${c.uid}/disable`)).status).toBe(200);
    const [e, p] = await queued(c, enable, patch);
    expect({ enable: [e.location_hint, e.disabled], patch: [p.location_hint, p.disabled] }).toEqual({
      enable: [null, false],
      patch: ['weur', false],
    });
    // And GET agrees with the later of the two.
    const g = await h.admin('GET', `/clusters/${c.uid}`);
    expect([g.json.location_hint, g.json.disabled]).toEqual(['weur', false]);
  }, 30_000);
});
