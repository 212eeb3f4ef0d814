/**
 * A session object's log lines name what they are about: cluster, session and seq once a session
 * is open, and the cluster and connection before (a refusal at the handshake). A poison frame the
 * database refuses is logged loudly, and a line that does not say which cluster sent it cannot be
 * acted on.
 */
import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it, vi } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import type { SessionObject } from '../../src/hub/session/session-object';
import { CloseCode } from '../../src/protocol';
import { admin, connect, eventually, hubEnv, newCluster, node } from './support/peer';

type Line = { level: string; msg: string; cluster?: string; session?: string; seq?: number; connection?: string; close?: number; reason?: string; why?: string };

const CONNECTION_ID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

/**
 * The JSON lines written to `console[level]` while `run` ran. Each line below is written before
 * the frame or close that `run` waits for, so nothing is left to wait for afterwards.
 */
async function logged(level: 'log' | 'warn' | 'error', run: () => Promise<void>): Promise<Line[]> {
  const spy = vi.spyOn(console, level);
  try {
    await run();
    return linesOf(spy.mock.calls);
  } finally {
    spy.mockRestore();
  }
}

function linesOf(calls: unknown[][]): Line[] {
  return calls
    .map((args) => String(args[0]))
    .filter((s) => s.startsWith('{'))
    .map((s) => JSON.parse(s) as Line);
}

describe('session log lines', () => {
  it('a frame the database refuses is logged with its cluster, session and seq', async () => {
    const c = await newCluster('logs');
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    const session = welcome.payload.session_id as string;
    const errors = await logged('error', async () => {
      peer.send('node.observed', node('n1'));
      // One at a time: this pool can reorder a burst of messages to an object (support/peer.ts).
      await peer.ackedThrough(1);
      // Postgres refuses a NUL in text: data no retry can store.
      const refusedId = peer.send('node.observed', { ...node('n-nul'), name: 'bad\u0000name' });
      const answer = await peer.next((f) => f.type === 'error' && f.reply_to === refusedId, 10_000);
      expect(answer.payload).toMatchObject({ code: 'invalid', message: expect.stringMatching(/database refused/) });
    });
    const poison = errors.find((l) => l.msg.startsWith('POISON FRAME: database refused'));
    expect(poison).toMatchObject({ level: 'error', cluster: c.uid, session, seq: 2 });
    peer.close();
  });

  it('a hello refused before any session opened is logged with the cluster and connection', async () => {
    const c = await newCluster('logs');
    const other = await newCluster('logs-other');
    const peer = await connect(c.token);
    const warnings = await logged('warn', async () => {
      // The token decides the cluster: a hello naming another one is refused (4400).
      peer.send('hello', { cluster_id: other.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
    });
    const refused = warnings.find((l) => l.msg === 'connection refused' && l.reason?.startsWith('hello.cluster_id does not name'));
    expect(refused).toMatchObject({ cluster: c.uid, connection: expect.stringMatching(CONNECTION_ID) });
  });

  it("an operator's close of its session's connection is logged with the connection, close code and reason as fields", async () => {
    const c = await newCluster('logs');
    const peer = await connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const spy = vi.spyOn(console, 'log');
    try {
      peer.close(1001);
      await peer.closed;
      const ended = await eventually(async () => linesOf(spy.mock.calls).find((l) => l.msg === 'session connection ended' && l.session === session));
      expect(ended).toMatchObject({ cluster: c.uid, session, connection: expect.stringMatching(CONNECTION_ID), close: 1001, reason: 'test done', why: 'closed by peer (1001: test done)' });
    } finally {
      spy.mockRestore();
    }
  });

  it('a hello that fails unexpectedly is logged with the cluster, session and connection of the refusal that follows', async () => {
    const c = await newCluster('logs');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    a.close();
    await a.closed;
    // A fault of the hub's own code late in the hello (after the connection carries the session):
    // the first thing the session does once opened throws, once.
    await runInDurableObject(sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string }), (i: SessionObject) => {
      const pump = (i as unknown as { pump: { learn(revision: number): void } }).pump;
      const learn = pump.learn.bind(pump);
      pump.learn = () => {
        pump.learn = learn;
        throw new Error('simulated fault');
      };
    });
    const b = await connect(c.token, s);
    const warnings: Line[] = [];
    const errors = await logged('error', async () => {
      warnings.push(
        ...(await logged('warn', async () => {
          await b.hello({ cluster_id: c.name, session_id: s, resume_from: a.hubCursor });
          expect((await b.closedWith()).code).toBe(CloseCode.INTERNAL);
        })),
      );
    });
    const failed = errors.find((l) => l.msg === 'hello failed unexpectedly');
    const refused = warnings.find((l) => l.msg === 'connection refused' && l.close === CloseCode.INTERNAL);
    expect(refused).toMatchObject({ cluster: c.uid, session: s, connection: expect.stringMatching(CONNECTION_ID) });
    expect(failed).toMatchObject({ cluster: c.uid, session: s, connection: refused?.connection, error: 'simulated fault' });
  });

  it("the Worker's refusal of a disabled cluster names the cluster", async () => {
    const c = await newCluster('logs');
    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    const warnings = await logged('warn', async () => {
      const peer = await connect(c.token);
      expect((await peer.closedWith()).code).toBe(CloseCode.REFUSED);
    });
    expect(warnings.find((l) => l.msg === 'connect refused' && l.reason === 'cluster is disabled')).toMatchObject({ cluster: c.uid });
  });
});
