/**
 * What a rotation does once its update has committed (read the session to cut, and for a disable
 * revoke a claim its update could not see) is a read of a write already applied, so it queues on a
 * gateway connection as reads do. It ran as the admin write's own kind of statement, sent only
 * within 1.5 s behind whatever was on the connection: on a busy shard it was refused unsent, the
 * live session was not poked, and a session holding a leaked token stayed open until the fleet
 * poll found it (and a disable's first-claim revocation, a1f085b, was skipped). Found by a
 * read-only review of the token lifecycle; fails on the code before.
 *
 * One gateway connection. The rotation's update waits on a row lock the test holds; an admin read
 * queued behind it on the same connection then waits on a table lock, so whatever the rotation
 * sends after its commit waits behind that read for longer than 1.5 s.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';

const POLL = 20_000;
const h = useHub({
  ...FAST_TIMERS,
  IDLE_TIMEOUT_MS: '30000',
  PING_INTERVAL_MS: '10000',
  RETENTION_MS: '60000',
  POLL_INTERVAL_MS: String(POLL),
  DB_GATEWAY_SHARDS: '1',
  DB_GATEWAY_CONNECTIONS: '1',
  PG_QUERY_TIMEOUT_MS: '8000',
});

describe('a rotation committed while its gateway connection is busy', () => {
  it('still cuts the live session at once, not at the next fleet poll', async () => {
    const c = await h.newCluster('busy-rotate');
    const other = await h.newCluster('busy-other');
    const { peer } = await h.openFresh(c);
    // Let the fleet poll's first pass after the claim go by: nothing else polls for 20 s.
    await sleep(500);

    const rowLock = await holdLock('select 1 from clusters where uid = $1 for share', [c.uid]);
    const tableLock = await holdLock('lock table desired_deployments in access exclusive mode');
    const rotated = h.admin('POST', `/clusters/${c.name}/rotate-token`);
    await sleep(300);
    // Queued on the one connection behind the rotation's update, waiting on the table lock once sent.
    const read = h.admin('GET', `/clusters/${other.name}/deployments`);
    await sleep(300);
    await rowLock();
    // The rotation commits; what it sends next waits behind the read for 3 s.
    await sleep(3_000);
    const t0 = Date.now();
    await tableLock();
    expect((await rotated).status).toBe(200);
    expect((await read).status).toBe(200);
    const closed = await peer.closedWith(5_000);
    expect({ code: closed.code, beforeThePoll: Date.now() - t0 < 5_000 }).toEqual({ code: CloseCode.REFUSED, beforeThePoll: true });
  }, 60_000);
});
