/**
 * /healthz is public: a flood of readiness checks must not become a flood of statements on the
 * gateway's few warm connections, which token lookups, claims and the fleet poll queue on. Checks
 * that arrive while a read of the database is under way share it. Found by a read-only review of
 * the hub's public routes: each check sent a statement of its own.
 *
 * The read is held on a lock (the ledger locked by another transaction) so that every check
 * arrives while it is under way; then the statements waiting on that lock are counted.
 */
import { describe, expect, it } from 'vitest';
import { eventually, holdLock, sleep, useHub, waitingOnLock } from './support/hub';

const h = useHub();

describe('GET /healthz under a flood of checks', () => {
  it('thirty checks at once wait on one statement, and all answer from it', async () => {
    expect((await fetch(`${h.hub.url}/healthz`)).status).toBe(200);
    const release = await holdLock('lock table schema_migrations in access exclusive mode');
    let answers: Promise<number[]> | undefined;
    try {
      answers = Promise.all(Array.from({ length: 30 }, () => fetch(`${h.hub.url}/healthz`).then((r) => r.status)));
      await eventually(async () => (await waitingOnLock(h, '%schema_migrations%')) > 0);
      // Time for any check that would have sent a statement of its own to reach the lock too.
      await sleep(500);
      expect(await waitingOnLock(h, '%schema_migrations%')).toBe(1);
    } finally {
      await release();
    }
    expect(await answers).toEqual(Array.from({ length: 30 }, () => 200));
  });
});
