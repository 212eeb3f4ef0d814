/**
 * "Logs are structured JSON with cluster, session and seq." The SDK's lines about a frame of the
 * hub's stream name the session that frame belongs to (seq numbers restart at 1 in every fresh
 * session, so a seq without its session points at nothing) and the frame's id: the receiver logs
 * through a logger bound to the session at each welcome (client.ts), with `id` on frame lines.
 * Shown on the line someone reads when desired state does not converge: a frame not applied, its
 * ack withheld.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { transient } from '../../../src/operator/handlers';
import { desiredPayload, makeClient, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
let t: TestClient | null = null;

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  await t?.client.stop({ graceful: false });
  t = null;
  await hub.stop();
});

describe('SDK lines about a hub frame name its session', () => {
  it('"frame not applied (transient)" carries cluster, session, seq and the frame id', async () => {
    t = makeClient(hub, { desiredResult: () => transient('the cluster API is unreachable') });
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-review' });
    const { id, seq } = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    const logger = t.logger;
    await eventually(() => logger.records.some((r) => r.msg.startsWith('frame not applied')), 'the transient failure to be logged');
    const line = logger.records.find((r) => r.msg.startsWith('frame not applied'));
    expect(line).toMatchObject({ level: 'warn', cluster: 'c1', seq, type: 'deployment.desired' });
    expect(line, 'the session the seq belongs to').toMatchObject({ session: 'S-review' });
    expect(line, "the frame's id").toMatchObject({ id });
  });
});
