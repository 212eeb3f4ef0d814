/**
 * Desired state across a crash of the session object (its in-memory pump state gone: what it has
 * queued, the latest revision it knows of), checked by a review of the pump and found to hold:
 * writes made while the object is down reach the operator once, in revision order, after its
 * resume (the unacknowledged frame replayed first, a withdrawal included); a poke that comes late,
 * carrying a revision older than one already sent, sends nothing.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { admin, connect, desired, hubEnv, newCluster, type Frame } from './support/peer';

const shown = (frames: Frame[]) =>
  frames.filter((f) => f.type === 'deployment.desired').map((f) => `${f.payload.deployment_id}@${f.payload.revision}${f.payload.deleted ? ' deleted' : ''}`);

describe('desired state across a crash of the session object', () => {
  it('writes while it is down arrive once and in order after the resume; a late poke for an older revision sends nothing', async () => {
    const c = await newCluster('crash-desired');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    const stub = () => sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
    const put = (id: string, max: number) => admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired({ max_replicas: max }));

    expect((await put('d1', 1)).json.revision).toBe(1);
    const first = await a.next((f) => f.type === 'deployment.desired');
    a.send('ack', {}, { ack: first.seq });
    expect((await put('d1', 2)).json.revision).toBe(2);
    await a.next((f) => f.type === 'deployment.desired');
    // Crashed with revision 2 sent and not acknowledged: the connection goes with the object.
    await runInDurableObject(stub(), (_i, state) => state.abort('crash (test)')).catch(() => undefined);
    await a.closed;

    // Each write pokes the rebuilt object, which has no connection to send on.
    expect((await put('d1', 3)).json.revision).toBe(3);
    expect((await put('d2', 4)).json.revision).toBe(4);
    expect((await admin('DELETE', `/clusters/${c.name}/deployments/d2`)).json.revision).toBe(5);

    const b = await connect(c.token, s);
    const w = await b.hello({ cluster_id: c.name, session_id: s, resume_from: first.seq });
    expect(w.payload.full_resync).toBe(false);
    await b.next((f) => f.type === 'deployment.desired' && f.payload.deleted === true);

    // The poke of revision 4 as it was written, arriving only now.
    const late = { deployment_id: 'd2', workload_id: 'w1', revision: 4, min_replicas: 1, max_replicas: 4, serving: desired().serving, deleted: false };
    await stub().poke(4, [{ kind: 'deployment', revision: 4, payload: late }]);
    expect((await put('d1', 6)).json.revision).toBe(6);
    await b.next((f) => f.type === 'deployment.desired' && f.payload.revision === 6);

    expect(shown(b.frames)).toEqual(['d1@2', 'd1@3', 'd2@5 deleted', 'd1@6']);
    expect(b.frames.map((f) => f.seq).filter((q) => q !== null)).toEqual([...new Set(b.frames.map((f) => f.seq).filter((q) => q !== null))]);
    expect(b.invalid).toEqual([]);
    b.close();
  });
});
