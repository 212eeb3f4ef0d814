/**
 * An operation whose operation.start can never be sent (larger than MAX_FRAME_BYTES: written by
 * another writer of Postgres, or before the limit was lowered; the admin API refuses such a body,
 * operation-frame-size.test.ts) is concluded failed, saying why, when the send path sends an error
 * in its place. Before, it stayed "sent" until its deadline, and every fresh session delivered it
 * again and refused it again: an operation must be run to a conclusion and reported (spec,
 * Operations). Found by a read-only review of operations.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { eventually, FAST_TIMERS, sleep, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: '8192' });

describe('an operation too large to send', () => {
  it('is concluded failed with the reason when its start is refused, and not delivered again to the next fresh session', async () => {
    const c = await h.newCluster('op-unsendable');
    const operationId = newId();
    const params: Record<string, string> = {};
    for (let i = 0; i < 10; i++) params[`p${i}`] = 'a'.repeat(1000);
    await h.sql(
      `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
       insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision)
       select $2, uid, 'model.prefetch', 'llama', $3::jsonb, now() + interval '1 hour', desired_revision from rev`,
      [c.uid, operationId, JSON.stringify(params)],
    );
    const refusedIn = (frames: { type: string; payload: Record<string, unknown> }[]) =>
      frames.filter((f) => f.type === 'error' && String(f.payload.message).includes(operationId));

    const first = await h.openFresh(c);
    await eventually(async () => refusedIn(first.peer.frames).length === 1);
    const op = await eventually(async () => {
      const r = await h.admin('GET', `/operations/${operationId}`);
      return r.json.state === 'failed' ? r.json : undefined;
    });
    expect(op.outcome_message).toMatch(/bytes, over the 8192 a frame may be/);
    first.peer.close();

    const again = await h.openFresh(c);
    // Open operations follow the resync's stream.end (which openFresh waited for).
    await sleep(500);
    expect(refusedIn(again.peer.frames)).toEqual([]);
    again.peer.close();
  });
});
