/**
 * Refusals and displacement with the SDK against the real hub (issue 11 items 1 and 3): whatever
 * the hub refuses (a rotated token, a disabled cluster, another major, the wrong cluster id, a
 * token that is not an enrollment token, a live session cut by the ownership poll) reaches the
 * application as one typed `refused` event with the hub's own error and one error log line, and
 * the next attempt is drawn under the whole backoff cap. A displaced operator (4409) comes back
 * asking for no session: it never resumes the session it was displaced from.
 *
 * The backoff cap is shrunk to 1.5 s (configuration); the jitter draw is the largest, so the
 * delay is the whole cap: an operator that drew under its first attempt's ceiling (100 ms) instead
 * would retry sooner, and one that waited past the cap would show it too.
 */
import { describe, expect, it } from 'vitest';
import { OperatorClient, type RefusedEvent } from '../../src/operator/client';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { applied } from '../../src/operator/handlers';
import { memoryLogger } from '../../src/operator/logger';
import type { Dialer } from '../../src/operator/transport';
import { wsDialer } from '../../src/operator/ws-transport';
import { E2E_CLIENT, until, useE2E } from './support/e2e';
import { WireTap } from './support/wire-tap';

const e = useE2E();
const CAP_MS = 1_500;

interface Dial {
  at: number;
  headers: Record<string, string>;
}

function operator(token: string, clusterId: string, options: { operatorVersion?: string; cursorStore?: MemoryCursorStore } = {}) {
  const tap = new WireTap();
  const dials: Dial[] = [];
  const inner = tap.dialer(wsDialer());
  const dial: Dialer = (request, events) => {
    dials.push({ at: Date.now(), headers: { ...request.headers } });
    return inner(request, events);
  };
  const logger = memoryLogger();
  const refused: (RefusedEvent & { at: number })[] = [];
  const client = new OperatorClient({
    url: e.hub.url,
    token,
    clusterId,
    operatorVersion: options.operatorVersion ?? '0.1.0',
    cursorStore: options.cursorStore ?? new MemoryCursorStore(),
    logger,
    dial,
    ...E2E_CLIENT,
    backoff: { baseMs: 100, capMs: CAP_MS },
    random: () => 0.999999,
    snapshot: () => ({ nodes: [], devices: [], deployments: [] }),
    handlers: { desired: () => applied(), pruneDesired: () => applied(), operation: () => ({ outcome: 'succeeded' }) },
  });
  client.on('refused', (r) => refused.push({ ...r, at: Date.now() }));
  const refusalLines = () => logger.records.filter((r) => r.level === 'error' && (r.msg === 'the hub refused this operator' || /another operator holds/.test(r.msg)));
  return { client, tap, dials, refused, logger, refusalLines };
}

/** Run until the second refusal: checks the first one's event, its log line and the wait before the retry. */
async function refusedTwice(op: ReturnType<typeof operator>): Promise<RefusedEvent> {
  await op.client.start();
  try {
    await until('two refusals', () => op.refused.length >= 2, 15_000);
  } finally {
    await op.client.stop({ graceful: false });
  }
  const [first] = op.refused;
  expect(first?.retryInMs).toBe(CAP_MS);
  // The retry came no sooner than the cap after the refusal.
  expect(op.dials.length).toBeGreaterThanOrEqual(2);
  expect((op.dials[1]?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(CAP_MS - 5);
  expect(op.refusalLines().length).toBe(op.refused.length);
  return first as RefusedEvent;
}

describe('refusals from the real hub reach the application', () => {
  it('a rotated token: 4403 with the hub error not_found', async () => {
    const reg = await e.register('refuse-rotated');
    await e.admin.rotateToken(reg.name);
    const first = await refusedTwice(operator(reg.token, reg.name));
    expect(first).toMatchObject({ kind: 'refused', closeCode: 4403, httpStatus: null, error: { code: 'not_found', retryable: false } });
    expect(first.error?.message).toMatch(/not valid/);
  });

  it('a disabled cluster: 4403 with the hub error conflict', async () => {
    const reg = await e.register('refuse-disabled');
    await e.admin.disable(reg.name);
    const first = await refusedTwice(operator(reg.token, reg.name));
    expect(first).toMatchObject({ kind: 'refused', closeCode: 4403, error: { code: 'conflict', message: 'cluster is disabled', retryable: false } });
  });

  it('an operator of another major: 4400 at the handshake with retryable false', async () => {
    const reg = await e.register('refuse-major');
    const first = await refusedTwice(operator(reg.token, reg.name, { operatorVersion: '9.0.0' }));
    expect(first).toMatchObject({ kind: 'handshake', closeCode: 4400, error: { code: 'invalid', retryable: false } });
    expect(first.error?.message).toMatch(/9\.0\.0/);
  });

  it('a hello naming another cluster: 4400 at the handshake', async () => {
    const reg = await e.register('refuse-cluster-id');
    const first = await refusedTwice(operator(reg.token, 'somebody-else'));
    expect(first).toMatchObject({ kind: 'handshake', closeCode: 4400, error: { code: 'invalid', retryable: false } });
    expect(first.error?.message).toMatch(/cluster_id/);
  });

  it('a bearer that is not an enrollment token: HTTP 401 with the JSON error body', async () => {
    const first = await refusedTwice(operator('not-an-enrollment-token', 'whatever'));
    expect(first).toMatchObject({ kind: 'unauthorized', httpStatus: 401, error: { code: 'unauthorized', retryable: false } });
    expect(first.error?.message).toMatch(/enrollment token/);
  });

  it('a live session cut by the ownership poll (cluster disabled): 4403 after the welcome, with the error', async () => {
    const reg = await e.register('refuse-live');
    const op = operator(reg.token, reg.name);
    await op.client.start();
    try {
      await until('the session to open', () => op.client.state === 'open');
      const session = op.client.session.sessionId;
      // Disabled in the database behind the hub's back (another plane component, a person with
      // psql): no admin request pokes the session, so only the fleet poll can find it out.
      await e.query('update clusters set disabled_at = now() where name = $1', [reg.name]);
      await until('the refusal', () => op.refused.length >= 1, 10_000);
      expect(op.refused[0]).toMatchObject({ kind: 'refused', closeCode: 4403, error: { code: 'conflict', retryable: false }, retryInMs: CAP_MS });
      expect(op.tap.links[0]?.welcome).not.toBeNull();
      expect(op.refusalLines()).toHaveLength(1);
      // Not displaced: the session is still the one to resume once the cluster is allowed back.
      await e.admin.enable(reg.name);
      await until('the session to open again', () => op.client.state === 'open' && op.tap.links.length >= 2, 10_000);
      expect(op.tap.links[1]?.hello).toMatchObject({ session_id: session });
    } finally {
      await op.client.stop({ graceful: false });
    }
  });
});

describe('displacement by the real hub', () => {
  it('the displaced operator logs once that another operator holds the cluster, waits the cap, and comes back asking for no session', async () => {
    const reg = await e.register('displaced-sdk');
    const storeA = new MemoryCursorStore();
    const a = operator(reg.token, reg.name, { cursorStore: storeA });
    const b = operator(reg.token, reg.name);
    await a.client.start();
    try {
      await until('A to open its session', () => a.client.state === 'open');
      const sessionA = a.client.session.sessionId as string;
      await b.client.start();
      await until('B to open its session', () => b.client.state === 'open');
      // The newest hello won the claim: the hub cuts A (its poll finds the claim moved).
      await until('A to be displaced', () => a.refused.length >= 1, 10_000);
      expect(a.refused[0]).toMatchObject({ kind: 'displaced', closeCode: 4409, retryInMs: CAP_MS, error: { code: 'conflict', retryable: false } });
      const displacedLines = a.logger.records.filter((r) => r.level === 'error' && /another operator holds this cluster/.test(r.msg));
      expect(displacedLines).toHaveLength(1);
      expect(storeA.peek()).toMatchObject({ sessionId: null, displacedSession: sessionA });

      await until("A's next hello", () => a.tap.links.length >= 2 && a.tap.links[1]?.hello, 10_000);
      expect(a.tap.links[1]?.hello).toEqual({ cluster_id: reg.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      expect(a.dials[1]?.headers['Wingsmith-Session']).toBeUndefined();
      expect((a.dials[1]?.at ?? 0) - (a.refused[0]?.at ?? 0)).toBeGreaterThanOrEqual(CAP_MS - 5);
      // What the hub does with two operators that keep coming back is the hub's contention
      // reporting; this side's promise is only that it never resumes the displaced session.
      for (const l of a.tap.links.slice(1)) expect(l.hello?.session_id ?? null).not.toBe(sessionA);
    } finally {
      await a.client.stop({ graceful: false });
      await b.client.stop({ graceful: false });
    }
  });
});
