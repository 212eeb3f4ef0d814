/**
 * A pass of the send path that fails after it has numbered frames (a storage write refused:
 * SQLITE_FULL, a value over the limit) must leave nothing half-done: neither storage (the frames'
 * replay rows without the session record that numbers them) nor memory (the record moved past
 * changes that were never stored as sent). What the operator resumes into is the last state the
 * object committed whole, and every change reaches it once, in order, under numbers it never saw
 * reused.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { CloseCode } from '../../src/protocol';
import type { SessionObject } from '../../src/hub/session/session-object';
import { admin, connect, desired, hubEnv, newCluster, type Frame } from './support/peer';

const shown = (frames: Frame[]) =>
  frames.filter((f) => f.type === 'deployment.desired').map((f) => `${f.payload.deployment_id}@${f.payload.revision}`);

type WithStore = { state: { store: { recordSentDesired: (rows: unknown) => void }; countDuplicate(): void; meta: StoredMeta | null } };
type WithSendPath = WithStore & { sendPath: { enqueue(o: unknown): boolean } };
type StoredMeta = { out: { nextSeq: number }; desiredWatermark: number; counters: { framesOut: number; duplicates: number } };

function refuseOnce(store: WithStore['state']['store']): void {
  const real = store.recordSentDesired.bind(store);
  let failed = false;
  store.recordSentDesired = (rows) => {
    if (!failed) {
      failed = true;
      throw new Error('SQLITE_FULL: database or disk is full (test)');
    }
    real(rows);
  };
}

/** A fresh session whose resync the operator has read and acknowledged, and a stub of its object. */
async function openAcked(prefix: string) {
  const c = await newCluster(prefix);
  const a = await connect(c.token);
  const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
  const end = await a.next((f) => f.type === 'stream.end');
  a.send('ack', {}, { ack: end.seq });
  const stub = () => sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
  return { c, a, s, end, stub };
}

describe('a send pass that fails after numbering', () => {
  it.each([
    ['resumed in the same object', false],
    ['resumed after an eviction', true],
  ])('closes 1011 and the session %s gets the change once, under a number never reused', async (_how, evict) => {
    const { c, a, s, end, stub } = await openAcked('send-fail');

    // The write that records which deployment a frame carried runs after the frames' replay rows
    // are written: refuse it once, as a full disk would.
    await runInDurableObject(stub(), (instance: SessionObject) => refuseOnce((instance as unknown as WithStore).state.store));
    const put = (id: string, max: number) => admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired({ max_replicas: max }));
    expect((await put('d1', 1)).status).toBe(200);
    expect((await a.closedWith()).code).toBe(CloseCode.INTERNAL);
    expect(shown(a.frames)).toEqual([]);

    // An eviction rebuilds the object from storage alone; without one, the object goes on with
    // whatever memory the failed pass left it.
    if (evict) await runInDurableObject(stub(), (_i, state) => state.abort('evicted (test)')).catch(() => undefined);

    const b = await connect(c.token, s);
    const w = await b.hello({ cluster_id: c.name, session_id: s, resume_from: end.seq });
    expect(w.payload.full_resync).toBe(false);
    expect(w.payload.session_id).toBe(s);
    await b.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'd1');
    expect((await put('d2', 2)).status).toBe(200);
    await b.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'd2');

    expect(shown(b.frames)).toEqual(['d1@1', 'd2@2']);
    const seqs = b.frames.filter((f) => f.type === 'deployment.desired').map((f) => f.seq);
    expect(seqs).toEqual([(end.seq as number) + 1, (end.seq as number) + 2]);
    expect(b.invalid).toEqual([]);
    b.close();
  });

  it('puts memory back before anything later in the same turn stores the session record', async () => {
    const { a, stub } = await openAcked('send-fail-turn');
    const stored = () =>
      runInDurableObject(stub(), (_i, state) => JSON.parse(state.storage.sql.exec<{ doc: string }>('select doc from meta where k = 1').one().doc) as StoredMeta);
    const before = await stored();

    // One turn: a change is queued (its pass numbers it, moves the watermark and fails to store),
    // then a duplicate frame's count stores the record, as the same operator message can.
    const held = await runInDurableObject(stub(), (instance: SessionObject) => {
      const i = instance as unknown as WithSendPath;
      // What a hello in progress holds across its awaits, and installs after them.
      const record = i.state.meta;
      refuseOnce(i.state.store);
      const payload = { deployment_id: 'd1', workload_id: 'w1', revision: 7, min_replicas: 1, max_replicas: 1, serving: desired().serving, deleted: false };
      i.sendPath.enqueue({ kind: 'frame', type: 'deployment.desired', payload: () => payload, replyTo: null, revision: 7 });
      i.state.countDuplicate();
      return { same: i.state.meta === record, watermark: record?.desiredWatermark };
    });
    expect(held, 'the record a caller holds is put back too, not replaced').toEqual({ same: true, watermark: before.desiredWatermark });
    const after = await stored();
    expect(after.counters.duplicates).toBe(before.counters.duplicates + 1);
    expect({ nextSeq: after.out.nextSeq, watermark: after.desiredWatermark, framesOut: after.counters.framesOut }).toEqual({
      nextSeq: before.out.nextSeq,
      watermark: before.desiredWatermark,
      framesOut: before.counters.framesOut,
    });
    expect((await a.closedWith()).code).toBe(CloseCode.INTERNAL);
  });
});
