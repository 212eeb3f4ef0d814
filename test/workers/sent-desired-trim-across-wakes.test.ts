/**
 * The table that resolves an operator's error to the deployment.desired it answers
 * (`sent_desired`, store.ts) is kept to its bound across evictions. An idle session is constructed
 * again at nearly every wake (DESIGN decision 10), so a row count kept only in memory, counted up
 * from 0 at each construction, never reaches the trim: the table grew by every frame sent, for
 * as long as the session lived.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { sessionStub } from '../../src/hub/address';
import { SessionSql } from '../../src/hub/session/schema';
import { SessionStore } from '../../src/hub/session/store';
import { newId } from '../../src/protocol';
import { hubEnv } from './support/peer';

/** The documented bound: 20,000 kept, trimmed once half as many again have accumulated. */
const KEEP = 20_000;

describe('sent_desired stays bounded across evictions', () => {
  it('frames recorded by successive constructions of the object are trimmed to the bound', async () => {
    const stub = sessionStub(hubEnv, { clusterUid: `rw-sent-${newId()}`, routeKey: newId() });
    const rows = await runInDurableObject(stub, async (_i, state) => {
      let n = 0;
      // Each pass is one construction of the object (a wake after an eviction) sending frames.
      for (let wake = 0; wake < 4; wake++) {
        const store = new SessionStore(state.storage, new SessionSql(state.storage.sql));
        const entries: [string, string, number][] = [];
        for (let i = 0; i < 12_000; i++, n++) entries.push([newId().slice(0, 16) + String(n).padStart(10, '0'), `d${n}`, n]);
        store.recordSentDesired(entries);
      }
      const count = state.storage.sql.exec<{ n: number }>('select count(*) as n from sent_desired').one().n;
      await state.storage.deleteAll();
      return count;
    });
    expect(rows).toBeLessThanOrEqual(KEEP * 1.5);
  });

  it('a drain that numbers a whole send queue of the longest deployment ids records every frame (bound as one value, the rows passed SQLite\'s 2 MB limit: SQLITE_TOOBIG and a 1011)', async () => {
    const stub = sessionStub(hubEnv, { clusterUid: `rw-sent-big-${newId()}`, routeKey: newId() });
    const recorded = await runInDurableObject(stub, async (_i, state) => {
      const store = new SessionStore(state.storage, new SessionSql(state.storage.sql));
      // SEND_QUEUE_FRAMES' default, each naming a deployment id of the longest identifier (253).
      const entries: [string, string, number][] = [];
      for (let i = 0; i < 20_000; i++) entries.push([newId(), `${String(i).padStart(6, '0')}-${'d'.repeat(246)}`, i + 1]);
      store.recordSentDesired(entries);
      const found = [store.sentDesiredFrame(entries[0]![0]), store.sentDesiredFrame(entries[19_999]![0])];
      const count = state.storage.sql.exec<{ n: number }>('select count(*) as n from sent_desired').one().n;
      await state.storage.deleteAll();
      return { count, found };
    });
    expect(recorded.count).toBe(20_000);
    expect(recorded.found).toEqual([
      { deploymentId: `000000-${'d'.repeat(246)}`, revision: 1 },
      { deploymentId: `019999-${'d'.repeat(246)}`, revision: 20_000 },
    ]);
  });
});
