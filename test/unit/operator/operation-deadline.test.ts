/**
 * An operation.start whose `deadline` matches the RFC 3339 pattern but names no time (hour 25)
 * was taken as an operation with a NaN deadline, which JSON wrote into the durable record as
 * null; the record could not be read back, so a restart set it aside and started as a new
 * operator (session, cursor and the operations' dedup records lost) and an accepted, running
 * operation ran a second time. Such a start is now a poison frame (found by a conformance audit,
 * 2026-12-03).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileCursorStore } from '../../../src/operator/cursor-store';
import { newId, type Payload } from '../../../src/protocol';
import { cursorReaches, makeClient, readResync, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
let dir: string;
const clients: TestClient[] = [];

beforeEach(async () => {
  hub = await ScriptedHub.start();
  dir = await mkdtemp(path.join(tmpdir(), 'operation-deadline-'));
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
  await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
});

function start(deadline: string): Payload<'operation.start'> {
  return { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline };
}

/**
 * A client on a file record accepts one operation (its handler never ends), then is sent a start
 * whose deadline matches RFC3339_RE (\\d{2} for the hour) but names no time (Date.parse: NaN),
 * answers it with an error and acks both.
 */
async function acceptedThenNoTime() {
  const file = path.join(dir, 'cursor.json');
  const ran: string[] = [];
  const handlers = {
    operation: (p: Payload<'operation.start'>) => {
      ran.push(p.operation_id);
      return new Promise<never>(() => {});
    },
  };
  const first = makeClient(hub, { cursorStore: new FileCursorStore(file), handlers });
  clients.push(first);
  await first.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: 'S1' });
  await readResync(conn);

  const good = start(new Date(first.timers.now() + 600_000).toISOString());
  conn.sendSeq('operation.start', good);
  await conn.nextOf('operation.accepted');
  conn.sendSeq('operation.start', start('2026-08-19T25:00:00Z'));
  await cursorReaches(first, 2);
  await conn.nextOf('error');
  first.timers.advance(50); // the ack, after a save of the record
  await eventually(() => conn.highestAck >= 2, 'ack 2');
  return { file, ran, handlers, first, conn, good };
}

describe('operation.start with a deadline that names no time', () => {
  it('keeps the durable record readable after such a start', async () => {
    const { file } = await acceptedThenNoTime();
    // The record as a restarted process reads it.
    await expect(new FileCursorStore(file).load()).resolves.toMatchObject({ sessionId: 'S1' });
  });

  it('after a restart still resumes the session and does not run an accepted operation twice', async () => {
    const { file, ran, handlers, first, good } = await acceptedThenNoTime();

    // A crash, and a restart on the same record.
    await first.client.stop({ graceful: false });
    const second = makeClient(hub, { cursorStore: new FileCursorStore(file), handlers });
    clients.push(second);
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    // The hub (a fresh session after the crash) delivers the unconcluded operation again.
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    conn2.sendSeq('operation.start', good);
    await cursorReaches(second, 1);
    expect(ran.filter((id) => id === good.operation_id)).toHaveLength(1);
    expect(hello.payload).toMatchObject({ session_id: 'S1' });
  });
});
