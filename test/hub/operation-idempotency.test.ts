/**
 * POST /admin/clusters/{id}/operations with an Idempotency-Key: a client that retries after a
 * timeout or a 503 (the statement may have committed) gets the operation it started, and the
 * operator is sent it once. Real workerd, real Postgres.
 */
import { describe, expect, it } from 'vitest';
import { sleep, useHub, type TestCluster } from './support/hub';

const h = useHub();

const DRAIN = { kind: 'node.drain', target: 'n-1', params: { grace_period_s: 30, evict_daemonsets: false }, deadline_s: 300 };

async function post(c: TestCluster, body: Record<string, unknown>, key?: string) {
  const res = await fetch(`${h.hub.url}/admin/clusters/${c.name}/operations`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${h.hub.adminToken}`,
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), json: (await res.json()) as Record<string, any> };
}

async function operationsOf(c: TestCluster): Promise<string[]> {
  const r = await h.admin('GET', `/clusters/${c.name}/operations`);
  expect(r.status).toBe(200);
  return (r.json.items as { operation_id: string }[]).map((o) => o.operation_id);
}

describe('operations: Idempotency-Key', () => {
  it('a retry with the same key returns the operation the first request started, marked replayed, and the operator gets one operation.start', async () => {
    const c = await h.newCluster('idem');
    const { peer } = await h.openFresh(c);
    const first = await post(c, DRAIN, 'retry-1');
    expect(first.status, JSON.stringify(first.json)).toBe(202);
    expect(first.replayed).toBeNull();
    // A retry asks again later: its deadline_s may differ, the operation is the same.
    const again = await post(c, { ...DRAIN, deadline_s: 299 }, 'retry-1');
    expect(again.status, JSON.stringify(again.json)).toBe(202);
    expect(again.replayed).toBe('true');
    expect(again.json.operation_id).toBe(first.json.operation_id);
    expect(await operationsOf(c)).toEqual([first.json.operation_id]);

    await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === first.json.operation_id);
    // A second start would follow within a poll or two (FAST_TIMERS off here: the 5 s poll), or at once by poke.
    await sleep(1_000);
    expect(peer.frames.filter((f) => f.type === 'operation.start')).toHaveLength(1);
    peer.close();
  });

  it('the same key with a different kind, target or params is refused 422 idempotency_key_reused and starts nothing', async () => {
    const c = await h.newCluster('idem');
    const first = await post(c, DRAIN, 'k-2');
    expect(first.status).toBe(202);
    for (const other of [{ ...DRAIN, target: 'n-2' }, { ...DRAIN, kind: 'node.cordon', params: {} }, { ...DRAIN, params: { grace_period_s: 31, evict_daemonsets: false } }]) {
      const r = await post(c, other, 'k-2');
      expect(r.status, JSON.stringify(r.json)).toBe(422);
      expect(r.json.error).toMatchObject({ code: 'idempotency_key_reused', field: 'Idempotency-Key' });
      expect(r.json.error.message).toContain(first.json.operation_id);
    }
    expect(await operationsOf(c)).toEqual([first.json.operation_id]);
  });

  it('requests racing with one key all get the one operation they started together', async () => {
    const c = await h.newCluster('idem');
    const answers = await Promise.all(Array.from({ length: 8 }, () => post(c, DRAIN, 'race')));
    for (const a of answers) expect(a.status, JSON.stringify(a.json)).toBe(202);
    const ids = new Set(answers.map((a) => a.json.operation_id as string));
    expect(ids.size).toBe(1);
    expect(answers.filter((a) => a.replayed === 'true')).toHaveLength(7);
    expect(await operationsOf(c)).toEqual([...ids]);
  });

  it('a key is per cluster, and requests without a key each start their own operation', async () => {
    const a = await h.newCluster('idem');
    const b = await h.newCluster('idem');
    const ra = await post(a, DRAIN, 'shared');
    const rb = await post(b, DRAIN, 'shared');
    expect([ra.status, rb.status]).toEqual([202, 202]);
    expect(rb.replayed).toBeNull();
    expect(ra.json.operation_id).not.toBe(rb.json.operation_id);
    const n1 = await post(a, DRAIN);
    const n2 = await post(a, DRAIN);
    expect(n1.json.operation_id).not.toBe(n2.json.operation_id);
    expect((await operationsOf(a)).sort()).toEqual([ra.json.operation_id, n1.json.operation_id, n2.json.operation_id].sort());
  });

  it('a malformed key (empty, a space, over 255 characters) is refused 400 naming the header, and starts nothing', async () => {
    const c = await h.newCluster('idem');
    for (const key of ['a b', 'x'.repeat(256), '']) {
      const r = await post(c, DRAIN, key);
      expect(r.status, `${JSON.stringify(key)}: ${JSON.stringify(r.json)}`).toBe(400);
      expect(r.json.error).toMatchObject({ code: 'invalid', field: 'idempotency-key' });
    }
    expect(await operationsOf(c)).toEqual([]);
  });
});
