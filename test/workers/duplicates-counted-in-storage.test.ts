/**
 * What a wake rebuilds of the session's counters (admin view, `counters`). The object may be
 * evicted between any two events; whatever it rebuilds comes from its SQLite (session-state.ts
 * reads the record through SessionStore.loadMeta), so a count kept only in memory is lost.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { SessionSql } from '../../src/hub/session/schema';
import type { SessionObject } from '../../src/hub/session/session-object';
import { SessionStore } from '../../src/hub/session/store';
import { newId } from '../../src/protocol';
import { connect, hubEnv, newCluster, node } from './support/peer';

/** The session record as an object constructed after an eviction would load it. */
function rebuiltMeta(state: DurableObjectState) {
  return new SessionStore(state.storage, new SessionSql(state.storage.sql)).loadMeta();
}

describe('counters survive an eviction', () => {
  it('a duplicate frame is counted in storage, not only in memory: an evicted session still shows it', async () => {
    const c = await newCluster('rw-dup');
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end');
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(welcome.payload.session_id as string) as string });

    const id = newId();
    peer.send('node.observed', node('n1'), { seq: 1, id });
    await peer.ackedThrough(1);
    // The same frame again: below the expectation, dropped and counted as a duplicate.
    peer.send('node.observed', node('n1'), { seq: 1, id });
    await expect
      .poll(() => runInDurableObject(stub, async (i: SessionObject) => (await i.status()).counters.duplicates))
      .toBe(1);

    // Nothing else happens on the session (an idle operator: its pings are answered by the
    // runtime), so this is what the next construction finds.
    const meta = await runInDurableObject(stub, (_i, state) => rebuiltMeta(state));
    expect(meta?.counters.duplicates).toBe(1);
    peer.close();
  });
});
