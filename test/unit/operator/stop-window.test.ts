/**
 * The window between the drain and the close in `stopNow`: `clean` is decided, then the record is
 * saved (`cleanOnSave`), then the link closed. A save that takes time (FileCursorStore: write,
 * fsync, rename, fsync the directory) leaves the link open and the receiver still dispatching. An
 * operation.start read there is accepted and its handler started (with a signal nobody aborts);
 * the single-flight save loops once more and writes `clean: true` with the operation `running`;
 * the accepted frame and the ack are never written (the link closes first). Nor may a dial in
 * flight when the stop began send a hello (it claims the cluster, and the newest hello wins: the
 * stopping pod would displace its successor), nor a welcome arriving then open a session.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore, type CursorStore, type DurableRecord } from '../../../src/operator/cursor-store';
import type { Dialer, TransportEvents } from '../../../src/operator/transport';
import type { OperationContext } from '../../../src/operator/handlers';
import { newId, type Payload } from '../../../src/protocol';
import { ackAll, makeClient, readResync, type TestClient } from './support/harness';
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

/** A cursor store whose saves wait while the gate is shut (a slow fsync). */
class GatedStore implements CursorStore {
  readonly inner = new MemoryCursorStore();
  shut = false;
  waiting = 0;
  private open: (() => void)[] = [];
  load() {
    return this.inner.load();
  }
  async save(record: DurableRecord): Promise<void> {
    if (this.shut) {
      this.waiting++;
      await new Promise<void>((r) => this.open.push(r));
    }
    await this.inner.save(record);
  }
  release(): void {
    this.shut = false;
    for (const r of this.open.splice(0)) r();
  }
}

describe('graceful stop: frames read while the final record is being saved', () => {
  it('no operation starts after the drain, and the record never says clean with an operation running', async () => {
    const store = new GatedStore();
    const started: { payload: Payload<'operation.start'>; ctx: OperationContext }[] = [];
    const t = makeClient(hub, {
      cursorStore: store,
      handlers: {
        operation: (payload, ctx) =>
          new Promise((resolve) => {
            started.push({ payload, ctx });
            ctx.signal.addEventListener('abort', () => resolve({ outcome: 'cancelled', message: 'stopped' }));
          }),
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1' });
    await readResync(conn);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'everything acked');

    store.shut = true;
    const stopped = t.client.stop({ graceful: true });
    await eventually(() => store.waiting > 0, 'the final save under way');

    const payload: Payload<'operation.start'> = {
      operation_id: newId(),
      kind: 'model.prefetch',
      target: 'meta/llama',
      params: {},
      deadline: new Date(t.timers.now() + 600_000).toISOString(),
    };
    conn.sendSeq('operation.start', payload);
    await new Promise((r) => setTimeout(r, 200));
    const startedAfterDrain = started.length;
    const abortedAfterStart = started[0]?.ctx.signal.aborted ?? null;
    store.release();
    await stopped;
    const saved = store.inner.peek();
    const op = saved?.operations.find((o) => o.operationId === payload.operation_id);
    expect({
      handlerStartedAfterDrain: startedAfterDrain,
      itsSignalAborted: abortedAfterStart,
      savedClean: saved?.clean,
      savedOperation: op?.state ?? 'absent',
      stillRunningAfterStop: started.length > 0 && !started[0]!.ctx.signal.aborted,
    }).toEqual({
      handlerStartedAfterDrain: 0,
      itsSignalAborted: null,
      savedClean: true,
      savedOperation: 'absent',
      stillRunningAfterStop: false,
    });
  });
});

describe('stop while the link is still opening', () => {
  it('a socket that opens after stop() began gets no hello', async () => {
    const sent: string[] = [];
    const dials: TransportEvents[] = [];
    const dial: Dialer = (_req, events) => {
      dials.push(events);
      return { send: (text) => sent.push(text), close: () => {}, bufferedAmount: 0 };
    };
    const store = new GatedStore();
    const t = makeClient(hub, { dial, cursorStore: store });
    clients.push(t);
    await t.client.start();
    await eventually(() => dials.length === 1, 'the dial');
    // SIGTERM while the upgrade is in progress; the final save is slow.
    store.shut = true;
    const stopped = t.client.stop();
    await eventually(() => store.waiting > 0, 'the stop to be saving');
    dials[0]!.onOpen();
    const hellos = sent.filter((text) => JSON.parse(text).type === 'hello').length;
    const state = t.client.state;
    store.release();
    await stopped;
    expect({ hellos, state }).toEqual({ hellos: 0, state: 'stopping' });
  });

  it('a welcome that arrives after stop() began opens no session in the stopping process', async () => {
    const store = new GatedStore();
    const t = makeClient(hub, { cursorStore: store });
    clients.push(t);
    const states: string[] = [];
    t.client.on('state', (st) => states.push(st));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    store.shut = true;
    const stopped = t.client.stop();
    await eventually(() => store.waiting > 0, 'the stop to be saving');
    conn.welcome({ session_id: 'S-new' });
    await new Promise((r) => setTimeout(r, 100));
    const during = { state: t.client.state, session: t.client.session.sessionId };
    store.release();
    await stopped;
    expect({ during, after: states.slice(states.indexOf('stopping')) }).toEqual({ during: { state: 'stopping', session: null }, after: ['stopping', 'stopped'] });
  });
});
