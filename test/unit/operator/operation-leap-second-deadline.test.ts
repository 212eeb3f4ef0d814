/**
 * An operation.start whose deadline is a leap second (second 60: RFC 3339 admits it, and so does
 * the catalog's Timestamp, test/unit/protocol/envelope.test.ts) was read with Date.parse, which
 * reads no second 60: NaN, so the start was dropped as one whose deadline "names no time", acked
 * and never answered (no operation.accepted, no error), and the handler never ran. The hub saw the
 * operation sit as sent until its deadline.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId, type Payload } from '../../../src/protocol';
import { cursorReaches, makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

describe('operation.start with a leap-second deadline', () => {
  it('is accepted and run until the next minute starts, not dropped unanswered', async () => {
    const ran: string[] = [];
    const handlers = {
      operation: (p: Payload<'operation.start'>) => {
        ran.push(p.operation_id);
        return new Promise<never>(() => {});
      },
    };
    const t = makeClient(hub, { handlers });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);

    // HH:MM:60Z, the instant HH:(MM+1):00Z: the next minute's start at least 2 s ahead.
    const at = Math.ceil((t.timers.now() + 2_000) / 60_000) * 60_000;
    const deadline = `${new Date(at - 60_000).toISOString().slice(0, 17)}60Z`;
    const start = { operation_id: newId(), kind: 'node.drain' as const, target: 'node-a', params: {}, deadline };
    const sent = conn.sendSeq('operation.start', start);

    await cursorReaches(t, sent.seq);
    const replies = () => conn.frames.filter((f) => f.reply_to === sent.id);
    await eventually(() => replies().length > 0, 'an answer to the start (before the fix: acked, never answered)');
    expect(replies().map((f) => f.type), 'answered, and as accepted').toEqual(['operation.accepted']);
    expect(ran).toEqual([start.operation_id]);

    // Its deadline comes at that instant, not a moment before (the hub pings meanwhile, as the
    // real one answers the operator's pings, so the link outlives the wait).
    while (t.timers.now() < at - 1) {
      t.timers.advance(Math.min(5_000, at - 1 - t.timers.now()));
      conn.ping(Math.max(0, ...conn.frames.map((f) => f.seq ?? 0)));
      await new Promise((r) => setTimeout(r, 10));
    }
    const answers = () => replies().filter((f) => f.type === 'error');
    expect(answers(), 'nothing before the deadline').toHaveLength(0);
    t.timers.advance(1);
    const [late] = await eventually(() => answers().length === 1 && answers(), 'the deadline error at the deadline');
    expect(late).toMatchObject({ payload: { code: 'deadline' } });
  });
});
