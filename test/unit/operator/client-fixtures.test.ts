/**
 * The fixture corpus through the operator's real receiver (issue 11 item 8, the SDK's half):
 * every fixture the hub may send (direction hub→op or both, alternative forms included) goes
 * into an `OperatorClient` through the scripted hub, renumbered and re-id'd into a valid stream,
 * with the fixture's own payload, and must reach the handler or event its type says. The cases
 * are keyed by fixture name and the corpus is enumerated from the directory: a new fixture the
 * hub may send fails here until it has a case.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Payload } from '../../../src/protocol';
import { fixture, sendableBy, type Fixture } from '../../support/fixtures';
import { cursorReaches, makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const payloadOf = <T extends keyof typeof PAYLOAD_TYPES>(name: T) => fixture(name).envelope.payload as unknown as Payload<(typeof PAYLOAD_TYPES)[T]>;
const PAYLOAD_TYPES = {
  welcome: 'welcome',
  error: 'error',
  'error.connection': 'error',
  'resync.begin': 'resync.begin',
  'deployment.desired': 'deployment.desired',
  'stream.end': 'stream.end',
  'operation.start': 'operation.start',
} as const;

/** A client with an open session (welcomed, its own resync written); link.stats seen. */
async function open(): Promise<{ t: TestClient; conn: HubConnection }> {
  const t = makeClient(hub);
  clients.push(t);
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1' });
  await readResync(conn);
  await conn.seen((f) => f.type === 'link.stats', 'link.stats');
  return { t, conn };
}

/** The hub's whole snapshot from the fixtures: begin, the fixture deployment in it, end (count renumbered). */
async function snapshotFromFixtures(t: TestClient, conn: HubConnection): Promise<void> {
  const begin = conn.sendSeq('resync.begin', payloadOf('resync.begin'));
  conn.sendSeq('deployment.desired', payloadOf('deployment.desired'), { reply_to: begin.id });
  conn.sendSeq('stream.end', { ...payloadOf('stream.end'), count: 1 }, { reply_to: begin.id });
  await cursorReaches(t, 3);
  expect(t.calls.desired.map((c) => c.payload)).toEqual([payloadOf('deployment.desired')]);
  expect(t.calls.desired[0]?.ctx.resyncId).toBe(begin.id);
  expect(t.calls.prunes.map((k) => [...k])).toEqual([[payloadOf('deployment.desired').deployment_id]]);
}

const CASES: Record<string, () => Promise<void>> = {
  async welcome() {
    const t = makeClient(hub);
    clients.push(t);
    const welcomes: unknown[] = [];
    t.client.on('welcome', (w) => welcomes.push(w));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    const w = payloadOf('welcome');
    conn.send('welcome', w, { reply_to: conn.helloId, ack: 0 });
    await eventually(() => welcomes.length === 1, 'the welcome event');
    // A session other than the one asked for (none): a fresh one, whatever full_resync says.
    expect(welcomes[0]).toEqual({ sessionId: w.session_id, fresh: true, hubVersion: w.hub_version, limits: w.limits, region: w.region ?? null });
    expect(t.client.session.limits).toEqual(w.limits);
  },
  async ping() {
    const { conn } = await open();
    conn.send('ping', {}, { ack: 0 });
    const pong = await conn.seen((f) => f.type === 'pong', 'the pong');
    expect(pong).toMatchObject({ seq: null, id: null, ts: null, ack: 0 });
  },
  async pong() {
    const { t, conn } = await open();
    conn.send('pong', {}, { ack: 2 });
    await eventually(() => t.client.session.outbound?.peerAck === 2, 'the pong to release the replay buffer');
  },
  async ack() {
    const { t, conn } = await open();
    conn.send('ack', {}, { ack: 3 });
    await eventually(() => t.client.session.outbound?.peerAck === 3, 'the ack to release the replay buffer');
  },
  async error() {
    const { t, conn } = await open();
    const seen: unknown[] = [];
    t.client.on('hubError', (e) => seen.push(e));
    const replyTo = conn.frames.find((f) => f.seq === 2)!.id;
    const { seq } = conn.sendSeq('error', payloadOf('error'), { reply_to: replyTo });
    await cursorReaches(t, seq);
    expect(seen).toEqual([{ payload: payloadOf('error'), replyTo, seq }]);
    expect(t.client.state).toBe('open');
  },
  async 'error.connection'() {
    const t = makeClient(hub, { random: () => 0 });
    clients.push(t);
    const seen: unknown[] = [];
    const refused: unknown[] = [];
    t.client.on('hubError', (e) => seen.push(e));
    t.client.on('refused', (r) => refused.push(r));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    const e = payloadOf('error.connection');
    conn.send('error', e, { form: 'connection', reply_to: conn.helloId });
    conn.close(4403, e.message);
    await eventually(() => refused.length === 1, 'the refused event');
    expect(seen).toEqual([{ payload: e, replyTo: conn.helloId, seq: null }]);
    expect(refused[0]).toMatchObject({ closeCode: 4403, error: e });
  },
  async 'resync.begin'() {
    const { t, conn } = await open();
    await snapshotFromFixtures(t, conn);
  },
  async 'deployment.desired'() {
    const { t, conn } = await open();
    conn.sendSeq('deployment.desired', payloadOf('deployment.desired'));
    await cursorReaches(t, 1);
    expect(t.calls.desired.map((c) => c.payload)).toEqual([payloadOf('deployment.desired')]);
  },
  async 'stream.end'() {
    const { t, conn } = await open();
    await snapshotFromFixtures(t, conn);
  },
  async 'operation.start'() {
    const { t, conn } = await open();
    const start = payloadOf('operation.start');
    // The fixture's deadline is after the test clock's start (2026-08-19T14:00Z).
    expect(Date.parse(start.deadline)).toBeGreaterThan(t.timers.now());
    const { id } = conn.sendSeq('operation.start', start);
    await eventually(() => t.calls.operations.length === 1, 'the operation handler');
    expect(t.calls.operations[0]).toEqual(start);
    const result = await conn.nextOf('operation.result');
    expect(result).toMatchObject({ reply_to: id, payload: { operation_id: start.operation_id, outcome: 'succeeded' } });
  },
};

const corpus: Fixture[] = sendableBy('hub');

describe('every fixture the hub may send reaches the operator SDK', () => {
  it('the corpus is enumerated from fixtures/ and fixtures/forms/, and each of its files has a case here', () => {
    expect(corpus.map((f) => f.name)).toContain('error.connection');
    expect(corpus.filter((f) => !CASES[f.name]).map((f) => f.file)).toEqual([]);
  });

  for (const f of corpus) {
    it(`${f.file}: ${f.direction}`, async () => {
      const run = CASES[f.name];
      if (!run) throw new Error(`no case for fixture ${f.file}: say what the SDK does with it`);
      await run();
    });
  }
});
