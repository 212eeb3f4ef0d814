/**
 * `start()` and `stop()` called around each other by the application: a stop made from a
 * 'state' listener while the start is still loading the record (the 'connecting' state is
 * emitted from inside `start()`), and a start made while a stop is under way. The stop gives the
 * state directory up when it resolves; whatever the start does after that is written into a
 * directory the next process may already hold.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CursorStore, DurableRecord } from '../../../src/operator/cursor-store';
import { openFileStores } from '../../../src/operator/file-stores';
import { makeClient, type TestClient } from './support/harness';
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

/** A cursor store whose load waits until released (a slow disk), counting saves. */
class SlowLoadStore implements CursorStore {
  saves = 0;
  loads = 0;
  private open: () => void = () => {};
  private readonly gate = new Promise<void>((r) => (this.open = r));
  constructor(private readonly inner: CursorStore) {}
  async load(): Promise<DurableRecord | null> {
    this.loads++;
    await this.gate;
    return this.inner.load();
  }
  async save(record: DurableRecord): Promise<void> {
    this.saves++;
    await this.inner.save(record);
  }
  release(): void {
    this.open();
  }
}

describe('start() and stop() called around each other', () => {
  it("a stop() made from a 'state' listener while start() loads the record resolves after the start: nothing is saved into the state directory once it has given it up", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-op-'));
    try {
      const stores = await openFileStores(dir);
      const store = new SlowLoadStore(stores.cursorStore);
      const t = makeClient(hub, { cursorStore: store, outboundLog: stores.outboundLog });
      clients.push(t);
      let stopped: Promise<void> | null = null;
      let savesWhenStopped: number | null = null;
      t.client.on('state', (s) => {
        // SIGTERM arrived while the operator was starting: the application stops it at once.
        if (s === 'connecting') stopped ??= t.client.stop().then(() => void (savesWhenStopped = store.saves));
      });
      const started = t.client.start();
      await eventually(() => store.loads > 0, 'the record being loaded');
      await new Promise((r) => setTimeout(r, 50));
      store.release();
      await started;
      await stopped;
      await new Promise((r) => setTimeout(r, 50));
      // The directory is free for the next process, and this one writes nothing more to it.
      const next = await openFileStores(dir);
      await next.outboundLog.close();
      expect({ savedAfterStop: store.saves - (savesWhenStopped ?? NaN), state: t.client.state, dials: hub.attempts }).toEqual({
        savedAfterStop: 0,
        state: 'stopped',
        dials: 0,
      });
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  });

  it('start() called while a stop() is under way throws, as after the stop, and loads nothing', async () => {
    const t = makeClient(hub);
    clients.push(t);
    const stopped = t.client.stop();
    expect(() => t.client.start()).toThrow(/start\(\) called/);
    await stopped;
    expect({ state: t.client.state, dials: hub.attempts }).toEqual({ state: 'stopped', dials: 0 });
  });
});
