import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCursorStore, type CursorStore, type DurableRecord } from '../../../src/operator/cursor-store';
import { applied, transient, type HandlerResult } from '../../../src/operator/handlers';
import { newId, type Payload } from '../../../src/protocol';
import { openFileStores } from '../../../src/operator/file-stores';
import { MemoryOutboundLog } from '../../../src/operator/outbound-log';
import { ackAll, cursorReaches, desiredPayload, makeClient, readResync, reconnectAfterBackoff, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub, type HubConnection } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
const track = (t: TestClient) => (clients.push(t), t);

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
      this.waiting--;
    }
    await this.inner.save(record);
  }
  release(): void {
    this.shut = false;
    for (const r of this.open.splice(0)) r();
  }
}

/** Run a first session to the point where everything sent is acknowledged. */
async function openAndSettle(t: TestClient, sessionId = 'S1') {
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: sessionId, full_resync: true });
  const stream = await readResync(conn);
  return { conn, stream };
}

describe('hello', () => {
  it('a new operator dials /v1/connect with its bearer token and says hello first, with no session', async () => {
    const t = track(makeClient(hub));
    await t.client.start();
    const conn = await hub.nextConnection();
    const first = await conn.next();
    expect(first.type).toBe('hello');
    expect(first.seq).toBeNull();
    expect(first.payload).toEqual({ cluster_id: 'c1', operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    expect(conn.headers.authorization).toBe('Bearer wsmet_test');
    expect(conn.headers['wingsmith-session']).toBeUndefined();
    // permessage-deflate is off.
    expect(conn.headers['sec-websocket-extensions']).toBeUndefined();
  });

  // A token read from a Secret file (or a Secret made `--from-file`) ends with a line break. Node refuses to
  // write it into a header, and every dial failed as if the network were down: an info line and
  // a retry, for ever, with no refusal to tell a person.
  it('a token with the line break a secret file ends with dials as the token itself', async () => {
    const t = track(makeClient(hub, { token: ' wsmet_test\n' }));
    await t.client.start();
    const conn = await hub.nextConnection();
    expect((await conn.next()).type).toBe('hello');
    expect(conn.headers.authorization).toBe('Bearer wsmet_test');
  });

  it('a token no HTTP header can carry is refused at construction with a TypeError that does not quote it', () => {
    for (const token of ['', ' \n', 'wsmet_te\nst', 'wsmet_te st', 'wsmet_tést']) {
      expect(() => makeClient(hub, { token }), JSON.stringify(token)).toThrow(TypeError);
      try {
        makeClient(hub, { token });
      } catch (err) {
        if (token.trim()) expect((err as Error).message).not.toContain(token.trim());
      }
    }
  });

  // A version read from a VERSION file ends with a line break, and Node refuses to write it into
  // the User-Agent: every dial failed as if the network were down, as with the token above.
  it('an operator version with the line break a VERSION file ends with dials, and says hello with the version itself', async () => {
    const t = track(makeClient(hub, { operatorVersion: '0.1.0\n' }));
    await t.client.start();
    const conn = await hub.nextConnection();
    const hello = await conn.nextOf('hello');
    expect(hello.payload).toMatchObject({ operator_version: '0.1.0' });
    expect(conn.headers['user-agent']).toBe('wingsmith-operator/0.1.0');
  });

  it('a cluster id or operator version no hello can carry is refused at construction with a TypeError', () => {
    for (const clusterId of ['', 'a'.repeat(254)]) {
      expect(() => makeClient(hub, { clusterId }), JSON.stringify(clusterId)).toThrow(/clusterId/);
    }
    for (const operatorVersion of ['', ' \n', 'v'.repeat(129), '0.1\n.0', '0.1.0\u2028x', '0.1.0-\u00e9']) {
      expect(() => makeClient(hub, { operatorVersion }), JSON.stringify(operatorVersion)).toThrow(TypeError);
    }
    expect(() => makeClient(hub, { clusterId: 'a'.repeat(253), operatorVersion: 'dev build 7' })).not.toThrow();
  });

  // Each lands in a timer: a NaN or 0 ping interval pinged every millisecond, a NaN idle limit
  // re-armed its check every millisecond and never closed a dead link.
  it('a timing or size option no schedule can mean is refused at construction with a RangeError', () => {
    for (const bad of [NaN, 0, -1, Infinity]) {
      for (const key of ['pingIntervalMs', 'idleTimeoutMs', 'handshakeTimeoutMs', 'ackTimeoutMs', 'statsIntervalMs', 'handlerStallMs', 'sendQueueCapacity', 'controlQueueLimit'] as const) {
        expect(() => makeClient(hub, { [key]: bad }), `${key}: ${bad}`).toThrow(RangeError);
      }
    }
    for (const bad of [NaN, -1, Infinity]) {
      for (const key of ['stableAfterMs', 'ackDelayMs', 'reobserveDelayMs', 'drainTimeoutMs'] as const) {
        expect(() => makeClient(hub, { [key]: bad }), `${key}: ${bad}`).toThrow(RangeError);
      }
    }
    expect(() => makeClient(hub, { sendQueueCapacity: 1.5 })).toThrow(RangeError);
    expect(() => makeClient(hub, { pingIntervalMs: 2.5, ackDelayMs: 0, drainTimeoutMs: 0, sendQueueCapacity: 16 })).not.toThrow();
  });

  it('writes no sequenced frame before welcome, then numbers from 1 and streams the full observed state', async () => {
    const t = track(makeClient(hub));
    t.client.reportNode(SNAPSHOT.nodes[0]!);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // Give the writer every chance to misbehave before the welcome.
    await new Promise((r) => setTimeout(r, 20));
    expect(conn.frames.filter((f) => f.seq !== null)).toEqual([]);

    conn.welcome({ session_id: 'S1' });
    const { begin, body, end } = await readResync(conn);
    const after = [await conn.next()];
    expect(begin.payload).toEqual({ scope: ['cluster', 'node', 'device', 'deployment'] });
    expect(body.map((f) => f.type)).toEqual(['cluster.observed', 'node.observed', 'device.observed']);
    expect(end.payload).toEqual({ complete: true, count: 3 });
    const seqs = conn.frames.filter((f) => f.seq !== null).map((f) => f.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    // The snapshot goes out whole first; then the queue: link.stats. The report queued earlier is
    // older than the snapshot, which lists that node: it is superseded, not sent after it.
    expect(after.map((f) => f.type)).toEqual(['link.stats']);
    expect(t.client.stats.queue.replacedFrames).toBe(1);
    // Every frame carries the inbound cursor.
    expect(conn.frames.filter((f) => f.seq !== null).every((f) => f.ack === 0)).toBe(true);
  });

  it('the send side logs with the session: "observed resync written" carries cluster, session and the seq of its stream.end (a seq of the session\'s numbering)', async () => {
    const t = track(makeClient(hub));
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S-logged' });
    const { end } = await readResync(conn);
    await eventually(() => t.logger.records.some((r) => r.msg === 'observed resync written'), 'the resync end to be logged');
    expect(t.logger.records.find((r) => r.msg === 'observed resync written')).toMatchObject({ level: 'info', cluster: 'c1', session: 'S-logged', seq: end.seq });
  });

  it('after a graceful stop the restart resumes: same session, durable cursor, not lossy', async () => {
    const store = new MemoryCursorStore();
    const first = track(makeClient(hub, { cursorStore: store }));
    const { conn } = await openAndSettle(first);
    const d = conn.sendSeq('deployment.desired', {
      deployment_id: 'd1', workload_id: 'w1', revision: 1, min_replicas: 1, max_replicas: 1, deleted: false,
      serving: { engine: 'vllm', model: 'm', image: 'i', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 },
    });
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    // Applied before the stop (a frame still unapplied when it begins is left to the next process).
    await eventually(() => first.client.session.cursor === d.seq, 'the desired frame applied');
    await first.client.stop();
    expect((await conn.waitClosed()).code).toBe(1000);
    const saved = store.peek()!;
    expect(saved).toMatchObject({ sessionId: 'S1', cursor: d.seq, clean: true });
    expect(saved.outbound.peerAck).toBe(saved.outbound.nextSeq - 1);
    // The cursor reached the hub before the close.
    expect(conn.highestAck).toBe(d.seq);

    const second = track(makeClient(hub, { cursorStore: store }));
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toEqual({ cluster_id: 'c1', operator_version: '0.1.0', session_id: 'S1', resume_from: 1, lossy: false });
    expect(conn2.headers['wingsmith-session']).toBe('S1');
  });

  it('a graceful stop reports counters changed since the last link.stats before it closes, not at an interval the process will not live to see', async () => {
    let failures = 1;
    const t = track(makeClient(hub, { statsIntervalMs: 60_000, desiredResult: () => (failures-- > 0 ? transient('not yet') : applied()) }));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    const d = conn.sendSeq('deployment.desired', {
      deployment_id: 'd1', workload_id: 'w1', revision: 1, min_replicas: 1, max_replicas: 1, deleted: false,
      serving: { engine: 'vllm', model: 'm', image: 'i', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 },
    });
    await eventually(() => t.client.stats.handlerFailures === 1, 'the handler to fail once');
    t.timers.advance(1_000);
    await eventually(() => t.client.session.cursor === d.seq, 'the retry to apply it');
    expect(conn.frames.filter((f) => f.type === 'link.stats').map((f) => f.payload.handler_failures)).toEqual([0]);
    const stopped = t.client.stop();
    // The hub acknowledges what the drain sends, as it would.
    await conn.seen((f) => f.type === 'link.stats' && f.payload.handler_failures === 1, 'the final link.stats');
    ackAll(conn);
    await stopped;
    expect((await conn.waitClosed()).code).toBe(1000);
    expect(conn.frames.filter((f) => f.type === 'link.stats').map((f) => f.payload.handler_failures)).toEqual([0, 1]);
  });

  it('a report made once the stop is over (or by a client stopped before it started) is refused, not queued for a send that never comes', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    await t.client.stop();
    const never = track(makeClient(hub));
    await never.client.stop();
    for (const c of [t, never]) {
      expect([
        c.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false }),
        c.client.removeDeployment('d1'),
        c.client.emitEvent('node', { subject: 'node-a', reason: 'Cordoned', message: '', severity: 'info' }),
      ]).toEqual(['rejected', 'rejected', 'rejected']);
      expect(c.client.stats.queued).toBe(0);
      // Told once, not once per report: informers still running after a stop would flood the log.
      expect(c.logger.records.filter((r) => r.level === 'warn' && /after the stop/.test(String(r.msg)))).toHaveLength(1);
      // A report no hub would take is still the caller's error.
      expect(() => c.client.removeNode('')).toThrow(TypeError);
    }
  });

  it('a removal the full send queue evicted is sent in a graceful stop\'s drain: the snapshot that would carry it never comes in this process', async () => {
    const t = track(makeClient(hub, { sendQueueCapacity: 4 }));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    ackAll(conn);
    // In one turn, before the writer runs: the removal is the oldest of five in a queue of four.
    t.client.removeNode('node-gone');
    for (let i = 0; i < 4; i++) t.client.reportNode({ ...SNAPSHOT.nodes[0]!, node_id: `filler-${i}` });
    expect(t.client.stats.queue.evictedFrames).toBe(1);
    const stopped = t.client.stop();
    let acked = 0;
    // The hub acknowledges what the drain sends, as it would.
    await eventually(() => {
      const max = Math.max(0, ...conn.frames.map((f) => f.seq ?? 0));
      if (max > acked) conn.send('ack', {}, { ack: (acked = max) });
      return t.client.state === 'stopped';
    }, 'the stop to drain');
    await stopped;
    const sent = conn.frames.filter((f) => f.seq !== null && /^node\.(observed|removed)$/.test(f.type) && f.reply_to === null).map((f) => `${f.type} ${String(f.payload.node_id)}`);
    expect(sent.slice(-5)).toEqual(['node.observed filler-0', 'node.observed filler-1', 'node.observed filler-2', 'node.observed filler-3', 'node.removed node-gone']);
  });

  it('after a crash with an in-memory replay buffer, hello says lossy', async () => {
    const store = new MemoryCursorStore();
    const first = track(makeClient(hub, { cursorStore: store }));
    await openAndSettle(first);
    // Frames are unacknowledged and the process dies: the buffer is gone with it.
    await first.client.stop({ graceful: false });
    expect(store.peek()!.clean).toBe(false);

    const second = track(makeClient(hub, { cursorStore: store, outboundLog: new MemoryOutboundLog() }));
    await second.client.start();
    const conn2 = await hub.nextConnection();
    const hello = await conn2.nextOf('hello');
    expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: true });
  });

  it('after a crash with a durable outbound log, the restart resumes and replays the unacked frames verbatim', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-op-'));
    try {
      const stores1 = await openFileStores(dir);
      const first = track(makeClient(hub, stores1));
      const { conn, stream } = await openAndSettle(first);
      await conn.seen((f) => f.type === 'link.stats', 'link.stats');
      // The hub saw everything but acknowledged only through the begin.
      conn.send('ack', {}, { ack: stream.begin.seq });
      await eventually(() => first.client.session.outbound?.peerAck === stream.begin.seq, 'the ack to land');
      await first.client.stop({ graceful: false });

      const stores2 = await openFileStores(dir);
      const second = track(makeClient(hub, stores2));
      await second.client.start();
      const conn2 = await hub.nextConnection();
      const hello = await conn2.nextOf('hello');
      expect(hello.payload).toMatchObject({ session_id: 'S1', resume_from: 0, lossy: false });
      conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: stream.begin.seq! });
      const sent = conn.frames.filter((f) => f.seq !== null && f.seq > stream.begin.seq!);
      const replayed = [];
      for (let i = 0; i < sent.length; i++) replayed.push(await conn2.next());
      expect(replayed.map((f) => f.raw)).toEqual(sent.map((f) => f.raw));
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  });

  it('a process whose state directory another took over (it stalled past the lock\'s staleness) stops at its next write: nothing more sent, nothing written, no hello', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-op-'));
    try {
      const t = track(makeClient(hub, await openFileStores(dir, { lock: { staleMs: 3_000 } })));
      const { conn } = await openAndSettle(t);
      await writeFile(path.join(dir, 'operator.lock'), JSON.stringify({ pid: 1, host: 'another-node', token: 'theirs', since: new Date().toISOString() }));
      // The holder's refresh (every second at this staleness) finds the lock is another's.
      await new Promise((resolve) => setTimeout(resolve, 1_300));
      const files = async () => Promise.all(['outbound.log', 'cursor.json', 'operator.lock'].map((f) => readFile(path.join(dir, f), 'utf8')));
      const before = await files();
      const seen = conn.frames.length;
      t.client.reportNode({ ...SNAPSHOT.nodes[0]!, node_id: 'after-takeover' });
      await eventually(() => t.client.state === 'stopped', 'the client to stop');
      expect(conn.frames.slice(seen).filter((f) => f.seq !== null)).toEqual([]);
      t.timers.advance(120_000);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(hub.connections).toHaveLength(1);
      expect(await files()).toEqual(before);
      expect(t.logger.records.some((l) => l.level === 'error' && /no longer this process/.test(String(l.msg)))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  });

  it('a start that could not read the cursor record: stop() gives the state directory up, and the log it could not vouch for still does not vouch for the session', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-op-'));
    try {
      // A crash with unacknowledged frames in the log, then bit rot inside a committed batch.
      const first = makeClient(hub, await openFileStores(dir));
      await openAndSettle(first);
      await first.client.stop({ graceful: false });
      const logFile = path.join(dir, 'outbound.log');
      const text = await readFile(logFile, 'utf8');
      const damaged = text.replace(/("type":"cluster\.observed"[^\n]*?"kubernetes_version":")1/, '$19');
      expect(damaged).not.toBe(text);
      await writeFile(logFile, damaged);
      // The record cannot be read for now (an I/O error, not a damaged record: the start fails).
      const cursorFile = path.join(dir, 'cursor.json');
      await rename(cursorFile, `${cursorFile}.away`);
      await mkdir(cursorFile);

      const failed = makeClient(hub, await openFileStores(dir));
      await expect(failed.client.start()).rejects.toThrow();
      await failed.client.stop();

      await rmdir(cursorFile);
      await rename(`${cursorFile}.away`, cursorFile);
      const next = track(makeClient(hub, await openFileStores(dir)));
      await next.client.start();
      const conn = await hub.nextConnection();
      expect((await conn.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: true });
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  });

  it('a start that fails (the record unreadable, or its first save refused) leaves the client stopped, not connecting, and dials nothing', async () => {
    const unreadable: CursorStore = { load: () => Promise.reject(new Error('EIO: i/o error, read')), save: () => Promise.resolve() };
    const inner = new MemoryCursorStore();
    const full: CursorStore = { load: () => inner.load(), save: () => Promise.reject(new Error('ENOSPC: no space left on device')) };
    for (const cursorStore of [unreadable, full]) {
      const t = track(makeClient(hub, { cursorStore }));
      const states: string[] = [];
      t.client.on('state', (s) => states.push(s));
      await expect(t.client.start()).rejects.toThrow(/EIO|ENOSPC/);
      expect({ state: t.client.state, last: states.at(-1) }).toEqual({ state: 'stopped', last: 'stopped' });
      // The stop an application makes after the failure (as before) is the same, finished one.
      await t.client.stop();
      expect(() => t.client.start()).toThrow(/state stopped/);
    }
    expect(hub.connections).toHaveLength(0);
  });

  it('a session found lossy at runtime (the hub closed 1009 over a frame in its buffer) stays lossy in its record: the next process says lossy instead of resuming into the same 1009', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-op-'));
    try {
      const big: Record<string, string> = {};
      for (let i = 0; i < 30; i++) big[`label-${i}`] = 'x'.repeat(200);
      const first = track(makeClient(hub, await openFileStores(dir)));
      const { conn } = await openAndSettle(first);
      first.client.reportNode({ ...SNAPSHOT.nodes[0]!, labels: big });
      await conn.seen((f) => f.type === 'node.observed' && f.seq !== null && f.reply_to === null, 'the big node.observed');
      // As the real hub does over a frame it will not take: the connection-level error, then 1009.
      conn.refuse({ code: 'invalid', message: 'frame exceeds max_frame_bytes', retryable: false }, 1009);
      await eventually(() => first.client.session.lossy, 'the session found lossy');
      // A rolling restart during the backoff: the log, rewritten whole at the stop, still names S1.
      await first.client.stop({ graceful: true, timeoutMs: 100 });

      const second = track(makeClient(hub, await openFileStores(dir)));
      await second.client.start();
      const hello = await (await hub.nextConnection()).nextOf('hello');
      expect(hello.payload).toMatchObject({ session_id: 'S1', lossy: true });
    } finally {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  });
});

describe('resume and fresh sessions', () => {
  it('a session closed 4400 soon after its welcome three times in a row (its first link and two resumes) is given up: the next hello says lossy (a resume never wedges)', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    // The hub refuses what the resume replays, as it would a frame it reads as a gap.
    const refuseReplay = (c: HubConnection) => c.refuse({ code: 'invalid', message: 'seq 7 is past the expected 3 (a gap)', retryable: false }, 4400);
    refuseReplay(conn);
    const hellos: Payload<'hello'>[] = [];
    for (let i = 0; i < 3; i++) {
      await reconnectAfterBackoff(t);
      const next = await hub.nextConnection();
      hellos.push((await next.nextOf('hello')).payload as Payload<'hello'>);
      if (i < 2) {
        next.welcome({ session_id: 'S1', full_resync: false });
        refuseReplay(next);
      }
    }
    expect(hellos.map((h) => [h.session_id, h.lossy])).toEqual([
      ['S1', false],
      ['S1', false],
      ['S1', true],
    ]);
    expect(t.logger.records.some((r) => /closed as a protocol error 3 times in a row soon after its welcome/.test(r.msg))).toBe(true);
  });

  it('quick 4400 closes of a session the hub since replaced by a fresh one do not count against the new one', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    const refuse = (c: HubConnection) => c.refuse({ code: 'invalid', message: 'a gap', retryable: false }, 4400);
    refuse(conn);
    const hellos: [string | null, boolean][] = [];
    for (let i = 0; i < 3; i++) {
      await reconnectAfterBackoff(t);
      const next = await hub.nextConnection();
      const hello = (await next.nextOf('hello')).payload as Payload<'hello'>;
      hellos.push([hello.session_id, hello.lossy]);
      if (i === 0) next.welcome({ session_id: 'S1', full_resync: false });
      // The hub grants a fresh session (a restart of its own, say).
      if (i === 1) {
        next.welcome({ session_id: 'S2', full_resync: true });
        await readResync(next);
      }
      refuse(next);
    }
    expect(hellos).toEqual([
      ['S1', false],
      ['S1', false],
      ['S2', false],
    ]);
  });

  it('a link that stayed up past stableAfterMs starts the count of quick 4400 closes again', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    const refuse = (c: HubConnection) => c.refuse({ code: 'invalid', message: 'a gap', retryable: false }, 4400);
    refuse(conn);
    const lossy: boolean[] = [];
    for (let i = 0; i < 4; i++) {
      await reconnectAfterBackoff(t);
      const next = await hub.nextConnection();
      lossy.push(((await next.nextOf('hello')).payload as Payload<'hello'>).lossy);
      next.welcome({ session_id: 'S1', full_resync: false });
      // The second resume works for a while: the count starts again.
      if (i === 1) {
        await eventually(() => t.client.state === 'open', 'the resume welcomed');
        t.timers.advance(10_001);
      }
      refuse(next);
    }
    expect(lossy).toEqual([false, false, false, false]);
  });

  it('re-sends unreleased frames after welcome with their original text, then continues the numbering', async () => {
    const t = track(makeClient(hub));
    const { conn, stream } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    const sent = conn.frames.filter((f) => f.seq !== null);
    const acked = stream.begin.seq!;
    conn.send('ack', {}, { ack: acked });
    await eventually(() => t.client.session.outbound?.peerAck === acked, 'the ack to land');
    conn.terminate();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    expect((await conn2.nextOf('hello')).payload).toMatchObject({ session_id: 'S1', lossy: false });
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked });
    const unreleased = sent.filter((f) => f.seq! > acked);
    for (const f of unreleased) expect((await conn2.next()).raw).toBe(f.raw);

    t.client.reportNode({ ...SNAPSHOT.nodes[0]!, ready: false });
    const fresh = await conn2.nextOf('node.observed');
    expect(fresh.seq).toBeGreaterThan(sent.length);
    // One contiguous stream: the replay, then new frames (link.stats for the reopened session, the report).
    const seqs = conn2.frames.filter((f) => f.seq !== null).map((f) => f.seq!);
    expect(seqs).toEqual(seqs.map((_, i) => acked + 1 + i));
  });

  it('a fresh session restarts numbering at 1 both ways and never re-sends frames of the old one', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    const oldIds = new Set(conn.frames.map((f) => f.id));
    conn.sendSeq('deployment.desired', {
      deployment_id: 'd1', workload_id: 'w1', revision: 1, min_replicas: 0, max_replicas: 1, deleted: false,
      serving: { engine: 'vllm', model: 'm', image: 'i', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 },
    });
    await cursorReaches(t, 1);
    conn.terminate();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    const { begin, end } = await readResync(conn2);
    const seqs = conn2.frames.filter((f) => f.seq !== null).map((f) => f.seq);
    expect(Math.min(...seqs.map(Number))).toBe(1);
    expect(conn2.frames.some((f) => oldIds.has(f.id))).toBe(false);
    expect(end.reply_to).toBe(begin.id);
    // Inbound numbering restarted too: the hub's seq 1 of the new session is accepted and acked.
    conn2.seqFrom(1);
    conn2.sendSeq('error', { code: 'internal', message: 'just a note', retryable: true });
    await cursorReaches(t, 1);
    t.timers.advance(50);
    await conn2.seen((f) => f.ack === 1, 'ack of the new session seq 1');
    expect(t.client.session).toMatchObject({ sessionId: 'S2', cursor: 1 });
  });

  it('a record save of the old session still under way at a fresh welcome never makes its cursor the durable one: no ping of the new session acks what it never received', async () => {
    const store = new GatedStore();
    let admit: ((r: HandlerResult) => void) | null = null;
    const t = track(makeClient(hub, {
      cursorStore: store,
      handlers: { admitOperation: () => new Promise<HandlerResult>((r) => (admit = r)) },
    }));
    const { conn } = await openAndSettle(t);
    for (const id of ['d1', 'd2', 'd3']) conn.sendSeq('deployment.desired', desiredPayload(id));
    await cursorReaches(t, 3);
    t.timers.advance(50);
    await eventually(() => t.client.session.durableCursor === 3, 'cursor 3 saved');
    // An operation whose gate is still deciding when the link drops.
    conn.sendSeq('operation.start', {
      operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(t.timers.now() + 600_000).toISOString(),
    });
    await eventually(() => admit !== null, 'the gate asked');
    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');

    // The gate admits it during the handshake: the operation is recorded, a save of session S1's
    // record (cursor 3) under way when the hub grants a fresh session.
    store.shut = true;
    admit!(applied());
    await eventually(() => store.waiting === 1, 'the old session\'s save under way');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await eventually(() => t.client.session.sessionId === 'S2', 'the fresh session taken');
    // That save completes; the next one (the new session's record) is slow.
    const saves = store.inner.saves;
    store.release();
    store.shut = true;
    await eventually(() => store.inner.saves > saves && store.waiting === 1, 'the new session\'s save under way');

    t.timers.advance(10_000); // the ping interval
    const ping = await conn2.nextOf('ping');
    const durableThen = t.client.session.durableCursor;
    store.release();
    // The hub has sent nothing in S2: an ack of 3 is one it reads as beyond what it sent (4400),
    // or, with frames sent, as their durable processing (it releases them from its buffer).
    expect(ping.ack).toBe(0);
    expect(durableThen).toBe(0);
  });

  it('events the hub never acknowledged before it granted a fresh session are lost (the resync does not carry history) and are counted in link.stats dropped_events', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    conn.send('ack', {}, { ack: Math.max(...conn.frames.map((f) => f.seq ?? 0)) });
    for (const reason of ['Cordoned', 'Drained']) t.client.emitEvent('node', { subject: 'node-a', reason, message: '', severity: 'info' });
    await conn.seen((f) => f.type === 'node.event' && (f.payload as { reason?: string }).reason === 'Drained', 'both events sent');
    conn.terminate();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await readResync(conn2);
    const stats = await conn2.seen((f) => f.type === 'link.stats', 'link.stats of the new session');
    expect(stats.payload).toMatchObject({ dropped_events: 2 });
    expect(conn2.frames.some((f) => f.type === 'node.event')).toBe(false);
    expect(t.client.stats.queue.droppedEvents).toBe(2);
  });

  it('a removal the hub never acknowledged before it granted a fresh session is sent again after the snapshot, unless the snapshot lists the subject: an incomplete snapshot would never remove it', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    conn.send('ack', {}, { ack: Math.max(...conn.frames.map((f) => f.seq ?? 0)) });
    t.client.removeNode('node-gone');
    // Removed, then back before the new session's snapshot: the snapshot lists it.
    t.client.removeNode('node-a');
    await conn.seen((f) => f.type === 'node.removed' && (f.payload as { node_id: string }).node_id === 'node-a', 'both removals sent');
    conn.terminate();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    const { end } = await readResync(conn2);
    const removal = await conn2.nextOf('node.removed');
    expect(removal.payload).toEqual({ node_id: 'node-gone' });
    expect(Number(removal.seq)).toBeGreaterThan(Number(end.seq));
    await new Promise((r) => setTimeout(r, 50));
    expect(conn2.frames.filter((f) => f.type === 'node.removed').map((f) => f.payload)).toEqual([{ node_id: 'node-gone' }]);
  });

  it('a removal dropped at a fresh session is not queued again when a newer report of its subject followed it (sent last, it would remove a subject that exists)', async () => {
    let calls = 0;
    const nodeZ = { ...SNAPSHOT.nodes[0]!, node_id: 'node-z', name: 'node-z' };
    const t = track(
      makeClient(hub, {
        snapshot: async () => {
          // The fresh session's snapshot fails once (an API server blip): the queue flows as it is.
          if (++calls === 2) throw new Error('api server busy');
          return calls === 1 ? SNAPSHOT : { ...SNAPSHOT, nodes: [...SNAPSHOT.nodes, nodeZ] };
        },
      }),
    );
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    conn.send('ack', {}, { ack: Math.max(...conn.frames.map((f) => f.seq ?? 0)) });
    t.client.removeNode('node-z');
    await conn.seen((f) => f.type === 'node.removed', 'the removal sent');
    // Back again: a newer word on the same node, never acknowledged either.
    t.client.reportNode(nodeZ);
    await conn.seen((f) => f.type === 'node.observed' && (f.payload as { node_id: string }).node_id === 'node-z', 'the newer report sent');
    conn.terminate();

    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S2', full_resync: true });
    await new Promise((r) => setTimeout(r, 50));
    expect(conn2.frames.filter((f) => f.type === 'node.removed')).toEqual([]);
    // The snapshot, retried, carries the node.
    for (let i = 0; i < 20 && !conn2.frames.some((f) => f.type === 'resync.begin'); i++) {
      t.timers.advance(2_000);
      await new Promise((r) => setTimeout(r, 10));
    }
    const { body } = await readResync(conn2);
    expect(body.some((f) => (f.payload as { node_id?: string }).node_id === 'node-z')).toBe(true);
    expect(conn2.frames.filter((f) => f.type === 'node.removed')).toEqual([]);
  });

  it('a removal dropped at a fresh session is not queued again when a newer report of its subject waits for room in the window (put back, not yet numbered)', async () => {
    let calls = 0;
    // Big enough that it does not fit in what the resumed session's byte window has left.
    const labels = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`label-${i}`, 'v'.repeat(200)]));
    const nodeZ = { ...SNAPSHOT.nodes[0]!, node_id: 'node-z', name: 'node-z', labels };
    const t = track(
      makeClient(hub, {
        snapshot: async () => {
          // The fresh session's snapshot fails (an API server blip): the queue flows as it is.
          if (++calls === 2) throw new Error('api server busy');
          return calls === 1 ? SNAPSHOT : { ...SNAPSHOT, nodes: [...SNAPSHOT.nodes, nodeZ] };
        },
      }),
    );
    const { conn } = await openAndSettle(t);
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    const acked = ackAll(conn);
    await eventually(() => t.client.stats.unacked === 0, 'the hub to acknowledge the opening');
    conn.terminate();

    // The session resumes with a byte window of 1000: the link.stats and the removal fit, the newer
    // report of the same node does not and waits, taken and put back, for the hub's ack.
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    t.client.removeNode('node-z');
    t.client.reportNode(nodeZ);
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: acked, limits: { replay_buffer_bytes: 1000 } });
    await conn2.seen((f) => f.type === 'node.removed', 'the removal sent');
    await eventually(() => t.client.stats.queued === 1 && t.client.stats.unacked === 2, 'the newer report to wait for the window');
    conn2.terminate();

    await reconnectAfterBackoff(t);
    const conn3 = await hub.nextConnection();
    await conn3.nextOf('hello');
    conn3.welcome({ session_id: 'S2', full_resync: true });
    await conn3.seen((f) => f.type === 'node.observed' && f.payload.node_id === 'node-z', 'the newer report sent');
    // A round trip: whatever the client wrote with the report is here too.
    const pongs = conn3.frames.filter((f) => f.type === 'pong').length;
    conn3.ping();
    await eventually(() => conn3.frames.filter((f) => f.type === 'pong').length > pongs, 'pong');
    expect(conn3.frames.filter((f) => f.type === 'node.removed')).toEqual([]);
  });

  it('a report the snapshot supersedes is counted replaced_frames, and the count reaches the hub in a link.stats', async () => {
    const t = track(makeClient(hub, { statsIntervalMs: 1_000 }));
    t.client.reportNode(SNAPSHOT.nodes[0]!); // queued before the session's snapshot, which lists the node
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await readResync(conn);
    await conn.nextOf('link.stats');
    expect(t.client.stats.queue.replacedFrames).toBe(1);
    for (let i = 0; i < 3 && !conn.frames.some((f) => f.type === 'link.stats' && (f.payload as { replaced_frames: number }).replaced_frames === 1); i++) {
      t.timers.advance(1_000);
      await new Promise((r) => setTimeout(r, 10));
    }
    const reports = conn.frames.filter((f) => f.type === 'link.stats').map((f) => (f.payload as { replaced_frames: number }).replaced_frames);
    expect(reports.at(-1)).toBe(1);
  });

  it('a session id different from the one asked for is a fresh session even without full_resync', async () => {
    const t = track(makeClient(hub));
    const { conn } = await openAndSettle(t);
    conn.terminate();
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    conn2.welcome({ session_id: 'S9', full_resync: false, ack_seq: 0 });
    const { begin } = await readResync(conn2);
    expect(begin.seq).toBeLessThanOrEqual(2);
    expect(t.client.session.sessionId).toBe('S9');
  });
});

const fixture = (type: string) => JSON.parse(readFileSync(new URL(`../../../fixtures/${type}.json`, import.meta.url), 'utf8')) as Record<string, unknown>;

/**
 * A close reason the SDK builds from the hub's own text: a frame numbered before the welcome is
 * closed over with `sequenced <type> before welcome`, and `type` is whatever the hub wrote (up to
 * 256 characters). A close reason is at most 123 bytes of UTF-8 and `ws` throws past that: cut by
 * characters, 60 two-byte ones threw out of the message handler (the operator process died), and a
 * process that survived it kept a link closing that never closed, and never dialled again.
 */
describe('a close reason built from the hub\'s text', () => {
  it('a frame numbered before welcome whose type is long non-ASCII text: the link is closed 4400 and the operator dials again', async () => {
    const t = makeClient(hub);
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    // The fixture's frame, as a hub that numbers it before any welcome and names it in 120 bytes.
    conn.sendRaw(JSON.stringify({ ...fixture('deployment.desired'), type: 'é'.repeat(60) }));
    const closed = await conn.waitClosed();
    expect(closed.code).toBe(4400);
    expect(Buffer.byteLength(closed.reason, 'utf8')).toBeLessThanOrEqual(123);
    await reconnectAfterBackoff(t);
    const again = await hub.nextConnection();
    expect((await again.nextOf('hello')).payload).toMatchObject({ session_id: null });
  });
});
