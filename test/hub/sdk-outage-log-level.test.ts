/**
 * The operator SDK's log levels tell an outage from a fault. While the hub's registry database is
 * unreachable the real hub answers a connect with HTTP 503, a JSON body
 * `{"error":{"code":"unavailable","message":"…retry with backoff"}}` and Retry-After: 5. The SDK
 * treats a 5xx or 429 at the upgrade as retryable (refusal.ts): a warning and the ordinary backoff
 * with Retry-After honoured, not the error line that pages someone for "the hub refused this
 * operator" (a rotated token, a disabled cluster).
 *
 * Real workerd, real hub; its database proxy points at a port nothing listens on.
 */
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { OperatorClient, type RefusedEvent } from '../../src/operator/client';
import { MemoryCursorStore } from '../../src/operator/cursor-store';
import { applied } from '../../src/operator/handlers';
import { memoryLogger } from '../../src/operator/logger';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

/** A port that was free a moment ago: connecting to it is refused. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const h = useHub({ ...FAST_TIMERS }, async () => ({ PG_WS_PROXY: `127.0.0.1:${await deadPort()}` }));

describe('SDK log levels during a hub database outage', () => {
  it('a connect turned away with 503 (registry unavailable) is logged at warn, not as an error refusal', async () => {
    const logger = memoryLogger();
    const refused: RefusedEvent[] = [];
    const closes: { httpStatus: number | null }[] = [];
    const client = new OperatorClient({
      url: h.hub.url,
      token: generateEnrollmentToken(),
      clusterId: 'rv-logs-outage',
      operatorVersion: '0.1.0',
      cursorStore: new MemoryCursorStore(),
      logger,
      backoff: { baseMs: 100, capMs: 3_000 },
      random: () => 0.5,
      snapshot: () => ({ nodes: [], devices: [], deployments: [] }),
      handlers: { desired: () => applied(), pruneDesired: () => applied(), operation: () => ({ outcome: 'succeeded' }) },
    });
    client.on('refused', (r) => refused.push(r));
    client.on('closed', (c) => closes.push({ httpStatus: c.httpStatus }));
    await client.start();
    try {
      const deadline = Date.now() + 15_000;
      while (closes.length === 0 && Date.now() < deadline) await sleep(50);
    } finally {
      await client.stop({ graceful: false });
    }
    expect(closes[0]?.httpStatus, 'the hub turned the connect away with 503').toBe(503);
    const errors = logger.records.filter((r) => r.level === 'error');
    expect(errors, 'error lines for a database outage the hub asked to retry through').toEqual([]);
    expect(logger.records.some((r) => r.level === 'warn')).toBe(true);
  }, 30_000);
});
