/**
 * Hub frames are applied one at a time, so a `desired` handler that never returns holds every
 * frame behind it and the cursor with them. Before, nothing said so: no line, no event, the
 * cluster simply stopped being managed. Now the stall is reported (an error line with cluster,
 * session, seq and id, and the `stalled` event) at `handlerStallMs` and again as the wait
 * doubles, and a line says when the handler returns; the frames behind it then apply.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applied, type HandlerResult } from '../../../src/operator/handlers';
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

describe('a handler that does not return', () => {
  it('is reported at handlerStallMs and as the wait doubles, and the stream moves once it returns', async () => {
    let release: (r: HandlerResult) => void = () => undefined;
    t = makeClient(hub, {
      handlerStallMs: 1_000,
      desiredResult: (p) => (p.deployment_id === 'stuck' ? new Promise<HandlerResult>((r) => (release = r)) : applied()),
    });
    const stalls: { seq: number; type: string; id: string; heldMs: number }[] = [];
    t.client.on('stalled', (s) => stalls.push(s));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-stall' });
    const stuck = conn.sendSeq('deployment.desired', desiredPayload('stuck'));
    const behind = conn.sendSeq('deployment.desired', desiredPayload('behind'));
    await eventually(() => t!.calls.desired.length === 1, 'the stuck handler to be called');

    t.timers.advance(999);
    expect(stalls).toEqual([]);
    t.timers.advance(1);
    expect(stalls).toEqual([{ seq: stuck.seq, type: 'deployment.desired', id: stuck.id, heldMs: 1_000 }]);
    const line = t.logger.records.find((r) => r.msg.startsWith('a handler has held the hub stream'));
    expect(line).toMatchObject({ level: 'error', cluster: 'c1', session: 'S-stall', seq: stuck.seq, id: stuck.id, held_ms: 1_000 });

    // Again at 2 s and 4 s held, not in between.
    t.timers.advance(999);
    expect(stalls.length).toBe(1);
    t.timers.advance(1);
    t.timers.advance(2_000);
    expect(stalls.map((s) => s.heldMs)).toEqual([1_000, 2_000, 4_000]);
    expect(t.client.session.cursor).toBe(0);
    expect(t.calls.desired.length, 'nothing behind the stuck frame is applied').toBe(1);

    release(applied());
    await eventually(() => t!.client.session.cursor === behind.seq, 'both frames to settle once the handler returns');
    expect(t.calls.desired.map((c) => c.payload.deployment_id)).toEqual(['stuck', 'behind']);
    expect(t.logger.records.find((r) => r.msg.startsWith('the held handler returned'))).toMatchObject({ level: 'warn', seq: stuck.seq });
    t.timers.advance(60_000);
    expect(stalls.length, 'no report after it returned').toBe(3);
  });

  it('a stall after a long one is reported at handlerStallMs too, not when the last one\'s next report was due', async () => {
    const releases = new Map<string, (r: HandlerResult) => void>();
    t = makeClient(hub, {
      handlerStallMs: 1_000,
      desiredResult: (p) => new Promise<HandlerResult>((r) => releases.set(p.deployment_id, r)),
    });
    const stalls: { seq: number; heldMs: number }[] = [];
    t.client.on('stalled', (s) => stalls.push({ seq: s.seq, heldMs: s.heldMs }));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-again' });
    const first = conn.sendSeq('deployment.desired', desiredPayload('first'));
    const second = conn.sendSeq('deployment.desired', desiredPayload('second'));
    await eventually(() => releases.has('first'), 'the first handler to be called');
    // Reported at 1, 2 and 4 s held: the next report of this stall would be due at 8 s.
    t.timers.advance(4_000);
    expect(stalls.map((s) => s.heldMs)).toEqual([1_000, 2_000, 4_000]);
    t.timers.advance(500);

    releases.get('first')?.(applied());
    await eventually(() => releases.has('second'), 'the second handler to be called');
    t.timers.advance(1_000);
    expect(stalls.slice(3), 'the second stall, reported at handlerStallMs').toEqual([{ seq: second.seq, heldMs: 1_000 }]);
    expect(first.seq).toBeLessThan(second.seq);
    releases.get('second')?.(applied());
    await eventually(() => t!.client.session.cursor === second.seq, 'both frames to settle');
  });

  it('a stop ends the reports: no stall timer outlives the client (it would keep the process running)', async () => {
    t = makeClient(hub, { handlerStallMs: 1_000, desiredResult: () => new Promise<HandlerResult>(() => undefined) });
    const stalls: unknown[] = [];
    t.client.on('stalled', (s) => stalls.push(s));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-stop' });
    conn.sendSeq('deployment.desired', desiredPayload('stuck'));
    await eventually(() => t!.calls.desired.length === 1, 'the stuck handler to be called');
    t.timers.advance(1_000);
    expect(stalls.length).toBe(1);
    await t.client.stop({ graceful: false });
    expect(t.timers.pending, 'timers left after stop').toBe(0);
    t.timers.advance(600_000);
    expect(stalls.length).toBe(1);
  });

  it('a handler that returns in time is never reported', async () => {
    t = makeClient(hub, { handlerStallMs: 1_000 });
    const stalls: unknown[] = [];
    t.client.on('stalled', (s) => stalls.push(s));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-fine' });
    const f = conn.sendSeq('deployment.desired', desiredPayload('d1'));
    await eventually(() => t!.client.session.cursor === f.seq, 'the frame to settle');
    t.timers.advance(10_000);
    expect(stalls).toEqual([]);
    expect(t.logger.records.some((r) => r.msg.startsWith('a handler has held'))).toBe(false);
  });
});
