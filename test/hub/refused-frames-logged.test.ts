/**
 * A well-formed frame the hub refuses is poison like a malformed one, and is logged as loudly.
 *
 * Spec "Poison frames": "A permanently unappliable frame is therefore accepted, discarded, and
 * logged loudly, exactly as an unknown type is." Found by a review of the inbound path: a
 * sequenced frame of a type only the hub sends (deployment.desired, its payload the fixture's)
 * and a stream.end naming no open stream were recorded, acknowledged and answered, but nothing
 * was logged, while the same deployment.desired with a malformed payload was logged at error.
 */
import { describe, expect, it } from 'vitest';
import { newId, type Payload } from '../../src/protocol';
import { fixture } from '../support/fixtures';
import { eventually, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
const h = useHub();

describe('well-formed frames the hub refuses (spec: Poison frames)', () => {
  it('a hub-only type and a stream.end for no open stream are recorded, acknowledged and logged as POISON at error level', async () => {
    const c = await h.newCluster('refused-logged');
    const { peer, sessionId } = await h.openFresh(c);
    const wrongWay = peer.send('deployment.desired', fixture('deployment.desired').envelope.payload as Payload<'deployment.desired'>); // seq 1
    const orphanEnd = peer.send('stream.end', { complete: true, count: 0 }, { reply_to: newId() }); // seq 2
    await peer.ackedThrough(2);
    expect(await h.sql('select seq::int as seq, type, reason from rejections where cluster_uid = $1 order by seq', [c.uid])).toEqual([
      { seq: 1, type: 'deployment.desired', reason: 'deployment.desired is not sent by an operator' },
      { seq: 2, type: 'stream.end', reason: 'stream.end for a stream that is not open' },
    ]);
    const poison = () => lines.filter((l) => l.session === sessionId && /^POISON FRAME/.test(l.msg));
    await eventually(async () => poison().length >= 2);
    expect(poison().map((l) => ({ level: l.level, seq: l.seq, type: l.type, frame_id: l.frame_id, reason: l.reason }))).toEqual([
      { level: 'error', seq: 1, type: 'deployment.desired', frame_id: wrongWay, reason: 'deployment.desired is not sent by an operator' },
      { level: 'error', seq: 2, type: 'stream.end', frame_id: orphanEnd, reason: 'stream.end for a stream that is not open' },
    ]);
    peer.close();
  });
});
