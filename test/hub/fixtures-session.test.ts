/**
 * The fixture corpus through the hub's real receiver (issue 11 item 8, the hub's half): every
 * fixture an operator may send (direction op→hub or both, alternative forms included) goes
 * through one session object in real workerd, each renumbered and re-id'd into a valid stream
 * (sequenced ones take the next seq, ids are new, a reply_to naming another fixture's id names
 * that frame's live id, every ack is the peer's real cursor), with the fixture's own payload. Each
 * must be accepted, applied or answered as its type says (rows in Postgres, an operation's
 * state, a pong), nothing may be recorded as a rejection, and the session must never close.
 *
 * The cases are keyed by fixture name and the corpus is enumerated from the directories: a new
 * fixture an operator may send fails here until it has a case.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { fixture, frameFrom, sendableBy, type Fixture } from '../support/fixtures';
import { FAST_TIMERS, useHub, type Frame, type Peer, type TestCluster } from './support/hub';

// The steps read Postgres between frames: a silence limit that needs no keep-alive pings.
const h = useHub({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000' });

const payload = (name: string) => fixture(name).envelope.payload as Record<string, any>;

/** One session shared by the steps, which run in ORDER. */
const s = {
  cluster: null as TestCluster | null,
  peer: null as Peer | null,
  /** Fixture id → the live id of the frame that stands for it. */
  ids: new Map<string, string>(),
  operationId: '',
  hubBegin: '',
  /** Frames sent carrying the session's own resync.begin id (the snapshot's count). */
  inSnapshot: 0,
};

const peer = (): Peer => {
  if (!s.peer) throw new Error('no session: the hello step did not run');
  return s.peer;
};
const uid = () => (s.cluster as TestCluster).uid;

/** Send a fixture as the next frame of the session; returns its live id and seq. */
function send(f: Fixture, over: { payload?: unknown; reply_to?: string | null } = {}): { id: string; seq: number | null } {
  const p = peer();
  const id = newId();
  if (f.envelope.id) s.ids.set(f.envelope.id, id);
  const seq = f.envelope.seq === null ? null : p.nextSeq++;
  const replyTo = over.reply_to !== undefined ? over.reply_to : f.envelope.reply_to ? (s.ids.get(f.envelope.reply_to) ?? null) : null;
  if (replyTo !== null && replyTo === s.ids.get(fixture('resync.begin').envelope.id as string)) s.inSnapshot++;
  p.sendRaw(frameFrom(f, { id, ...(seq === null ? {} : { seq }), ack: p.hubCursor, reply_to: replyTo, ...(over.payload ? { payload: over.payload } : {}) }));
  return { id: f.envelope.id === null ? '' : id, seq };
}

/** Send and wait until the hub has applied it (its ack covers the seq). */
async function applied(f: Fixture, over: Parameters<typeof send>[1] = {}): Promise<{ id: string; seq: number }> {
  const r = send(f, over);
  if (r.seq === null) throw new Error(`${f.name} is not sequenced`);
  await peer().ackedThrough(r.seq);
  return { id: r.id, seq: r.seq };
}

/** The session is alive and answering: a ping now gets a pong. */
async function stillOpen(): Promise<Frame> {
  const p = peer();
  expect(p.isClosed).toBe(false);
  send(fixture('ping'));
  const pong = await p.next((f) => f.type === 'pong');
  expect(p.isClosed).toBe(false);
  return pong;
}

async function rows(sql: string, params: unknown[] = []): Promise<Record<string, any>[]> {
  return h.sql(sql, [uid(), ...params]);
}

async function operation(): Promise<any> {
  return (await h.admin('GET', `/operations/${s.operationId}`)).json;
}

const CASES: Record<string, () => Promise<void>> = {
  async hello() {
    s.cluster = await h.newCluster('fixtures');
    s.peer = await h.connect(s.cluster.token);
    // The fixture's own hello, naming this cluster; its session is one this hub has no record of.
    const { id } = send(fixture('hello'), { payload: { ...payload('hello'), cluster_id: s.cluster.name } });
    const welcome = await peer().next((f) => f.type === 'welcome' || f.type === 'error');
    expect(welcome).toMatchObject({ type: 'welcome', reply_to: id, payload: { full_resync: true } });
    expect(welcome.payload.session_id).not.toBe(payload('hello').session_id);
    const begin = await peer().next((f) => f.type === 'resync.begin');
    s.hubBegin = begin.id;
    await peer().next((f) => f.type === 'stream.end' && f.reply_to === begin.id);
    // An operation for the operation.* fixtures to report on.
    const r = await h.admin('POST', `/clusters/${s.cluster.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status).toBe(202);
    s.operationId = r.json.operation_id;
    const start = await peer().next((f) => f.type === 'operation.start' && f.payload.operation_id === s.operationId);
    s.ids.set(fixture('operation.start').envelope.id as string, start.id);
  },
  async ping() {
    const pong = await stillOpen();
    expect(pong.ack).toBe(peer().nextSeq - 1);
  },
  async pong() {
    const before = peer().frames.length;
    send(fixture('pong'));
    await stillOpen();
    // Nothing answers a pong: the only new frame is the pong to our own ping.
    expect(peer().frames.slice(before).map((f) => f.type)).toEqual(['pong']);
  },
  async ack() {
    send(fixture('ack'));
    await stillOpen();
  },
  async 'resync.begin'() {
    await applied(fixture('resync.begin'));
  },
  async 'cluster.observed'() {
    await applied(fixture('cluster.observed'));
    expect(await rows('select kubernetes_version, provider, region, labels from observed_clusters where cluster_uid = $1')).toEqual([
      { ...payload('cluster.observed') },
    ]);
  },
  async 'node.observed'() {
    await applied(fixture('node.observed'));
    expect(await rows('select node_id, name, ready from nodes where cluster_uid = $1')).toEqual([
      { node_id: payload('node.observed').node_id, name: payload('node.observed').name, ready: true },
    ]);
  },
  async 'stream.end'() {
    // The fixture's count describes its own example stream; this one carried what was sent.
    const count = s.inSnapshot;
    expect(count).toBe(2);
    await applied(fixture('stream.end'), { payload: { ...payload('stream.end'), count } });
    // A complete snapshot: what it named stays.
    expect((await rows('select node_id from nodes where cluster_uid = $1')).map((r) => r.node_id)).toEqual([payload('node.observed').node_id]);
  },
  async 'device.observed'() {
    await applied(fixture('device.observed'));
    expect(await rows('select device_id, node_id, health from devices where cluster_uid = $1')).toEqual([
      { device_id: payload('device.observed').device_id, node_id: payload('device.observed').node_id, health: 'healthy' },
    ]);
  },
  async 'deployment.observed'() {
    await applied(fixture('deployment.observed'));
    const p = payload('deployment.observed');
    expect(await rows('select deployment_id, phase from observed_deployments where cluster_uid = $1')).toEqual([{ deployment_id: p.deployment_id, phase: p.phase }]);
    expect((await rows('select replica_id from replicas where cluster_uid = $1 order by 1')).map((r) => r.replica_id)).toEqual([...p.replica_ids].sort());
  },
  async 'node.event'() {
    await event('node.event');
  },
  async 'device.event'() {
    await event('device.event');
  },
  async 'deployment.event'() {
    await event('deployment.event');
  },
  async 'link.stats'() {
    await applied(fixture('link.stats'));
    const p = payload('link.stats');
    expect(
      await rows('select epoch, dropped_events, evicted_frames, replaced_frames, handler_failures, dropped_progress from link_stats where cluster_uid = $1'),
    ).toEqual([
      {
        epoch: p.epoch,
        dropped_events: String(p.dropped_events),
        evicted_frames: String(p.evicted_frames),
        replaced_frames: String(p.replaced_frames),
        handler_failures: String(p.handler_failures),
        dropped_progress: String(p.dropped_progress),
      },
    ]);
    // And in the cluster view, where an operator's known losses are read.
    expect((await h.admin('GET', `/clusters/${uid()}`)).json.link).toMatchObject({ handler_failures: p.handler_failures, dropped_progress: p.dropped_progress });
  },
  async 'node.removed'() {
    const id = payload('node.removed').node_id;
    await applied(fixture('node.observed'), { payload: { ...payload('node.observed'), node_id: id }, reply_to: null });
    expect(await rows('select 1 from nodes where cluster_uid = $1 and node_id = $2', [id])).toHaveLength(1);
    await applied(fixture('node.removed'));
    expect(await rows('select 1 from nodes where cluster_uid = $1 and node_id = $2', [id])).toHaveLength(0);
  },
  async 'device.removed'() {
    const id = payload('device.removed').device_id;
    await applied(fixture('device.observed'), { payload: { ...payload('device.observed'), device_id: id } });
    expect(await rows('select 1 from devices where cluster_uid = $1 and device_id = $2', [id])).toHaveLength(1);
    await applied(fixture('device.removed'));
    expect(await rows('select 1 from devices where cluster_uid = $1 and device_id = $2', [id])).toHaveLength(0);
  },
  async 'deployment.removed'() {
    const id = payload('deployment.removed').deployment_id;
    await applied(fixture('deployment.observed'), { payload: { ...payload('deployment.observed'), deployment_id: id, replica_ids: [], ready_replicas: 0 } });
    expect(await rows('select 1 from observed_deployments where cluster_uid = $1 and deployment_id = $2', [id])).toHaveLength(1);
    await applied(fixture('deployment.removed'));
    expect(await rows('select 1 from observed_deployments where cluster_uid = $1 and deployment_id = $2', [id])).toHaveLength(0);
  },
  async 'operation.accepted'() {
    await applied(fixture('operation.accepted'), { payload: { operation_id: s.operationId } });
    expect(await operation()).toMatchObject({ state: 'accepted' });
  },
  async 'operation.progress'() {
    await applied(fixture('operation.progress'), { payload: { ...payload('operation.progress'), operation_id: s.operationId } });
    expect(JSON.stringify((await operation()).history)).toContain(payload('operation.progress').phase);
  },
  async 'operation.result'() {
    await applied(fixture('operation.result'), { payload: { ...payload('operation.result'), operation_id: s.operationId } });
    expect(await operation()).toMatchObject({ state: payload('operation.result').outcome });
  },
  async error() {
    // The fixture answers a frame the operator could not read: here, the hub's own resync.begin.
    await applied(fixture('error'), { reply_to: s.hubBegin });
    expect(await operation()).toMatchObject({ state: payload('operation.result').outcome });
    await stillOpen();
  },
  async 'error.connection'() {
    // Unsequenced: nothing to acknowledge, and by itself no reason to close.
    send(fixture('error.connection'), { reply_to: null });
    await stillOpen();
  },
};

async function event(name: 'node.event' | 'device.event' | 'deployment.event'): Promise<void> {
  const { id } = await applied(fixture(name));
  const p = payload(name);
  expect(await rows('select kind, subject, reason, severity from events where cluster_uid = $1 and frame_id = $2', [id])).toEqual([
    { kind: name.split('.')[0], subject: p.subject, reason: p.reason, severity: p.severity },
  ]);
}

const ORDER = [
  'hello',
  'ping',
  'pong',
  'ack',
  'resync.begin',
  'cluster.observed',
  'node.observed',
  'stream.end',
  'device.observed',
  'deployment.observed',
  'node.event',
  'device.event',
  'deployment.event',
  'link.stats',
  'node.removed',
  'device.removed',
  'deployment.removed',
  'operation.accepted',
  'operation.progress',
  'operation.result',
  'error',
  'error.connection',
];

const corpus = sendableBy('operator');

describe('every fixture an operator may send, through a real session object', () => {
  it('the corpus is enumerated from fixtures/ and fixtures/forms/, and each of its files has a case, in order', () => {
    expect(corpus.map((f) => f.name)).toContain('error.connection');
    expect(corpus.filter((f) => !CASES[f.name] || !ORDER.includes(f.name)).map((f) => f.file)).toEqual([]);
    expect([...ORDER].sort()).toEqual(corpus.map((f) => f.name).sort());
  });

  for (const name of ORDER) {
    const f = corpus.find((x) => x.name === name);
    it(`${f?.file ?? name}: ${f?.direction ?? 'not in the corpus'}`, async () => {
      const run = CASES[name];
      if (!f || !run) throw new Error(`no fixture or no case for ${name}`);
      await run();
      expect(peer().isClosed).toBe(false);
    });
  }

  it('nothing was recorded as a rejection, and the session is still open and answering', async () => {
    expect(await rows('select type, reason from rejections where cluster_uid = $1')).toEqual([]);
    await stillOpen();
    peer().close();
  });
});
