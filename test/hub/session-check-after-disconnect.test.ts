/**
 * A session's check (poked by the fleet poll) whose statement is held on its way to Postgres while
 * the session's connection ends: the disconnect, published on another gateway connection, commits
 * first; the check's statement arrives after it and commits, and its connection is reset before
 * the hub hears the answer. The check must not bring back "connected" for a session whose end was
 * already published: the disconnect also took it out of the fleet poll, so nothing would correct
 * it, and the operator's next fresh hello would be recorded as taking the cluster from it.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { desired, eventually, FAST_TIMERS } from './support/hub';

/** The session check's prepared statement, as its Parse and Bind messages name it (ownership.ts; any version). */
const CHECK_STATEMENT = Buffer.from('wingsmith_session_check_v');
/** ReadyForQuery (idle): the end of a statement's answer. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

interface HoldRelay {
  port: number;
  /** Hold the link of the next session check from its statement on; resolves once held. */
  holdNextCheck(): Promise<void>;
  /** Deliver the held statement, and reset its link once its answer (after its commit) arrives, unforwarded. */
  releaseAndReset(): Promise<void>;
  close(): void;
}

/** A TCP relay in front of Postgres that passes everything through, but can hold one link's statement and then reset it. */
async function startHoldRelay(target: { host: string; port: number }): Promise<HoldRelay> {
  const sockets = new Set<net.Socket>();
  let armed: (() => void) | null = null;
  let release: (() => Promise<void>) | null = null;
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    sockets.add(client);
    sockets.add(upstream);
    let held: Buffer[] | null = null;
    let answer: Buffer[] | null = null;
    let answered: (() => void) | null = null;
    client.on('data', (chunk: Buffer) => {
      if (held) return void held.push(chunk);
      if (armed && chunk.includes(CHECK_STATEMENT)) {
        held = [chunk];
        const onHeld = armed;
        armed = null;
        release = () =>
          new Promise<void>((r) => {
            answer = [];
            answered = r;
            for (const c of held ?? []) upstream.write(c);
            held = null;
          });
        return onHeld();
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (answer === null) return void client.write(chunk);
      answer.push(chunk);
      if (!Buffer.concat(answer).subarray(-READY.length).equals(READY)) return;
      // Committed on the server; the hub never hears of it.
      client.resetAndDestroy();
      upstream.resetAndDestroy();
      answered?.();
    });
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
      a.on('end', () => b.end());
      a.on('error', () => b.destroy());
      a.on('close', () => sockets.delete(a));
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    holdNextCheck: () => new Promise<void>((r) => (armed = r)),
    releaseAndReset: () => {
      if (!release) throw new Error('no check held');
      return release();
    },
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000', PG_QUERY_TIMEOUT_MS: '5000' }, startHoldRelay);

describe("a session check that reaches Postgres after the session's disconnect was published", () => {
  it('does not show the ended session connected, and the next fresh hello is not recorded as displacing it', async () => {
    const c = await h.newCluster('check-late');
    const { peer, sessionId } = await h.openFresh(c);
    const held = relay().holdNextCheck();
    // A desired change the session has not recorded seeing: the fleet poll pokes it to check.
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
    await held;

    // The connection ends while the check is on its way; its disconnect commits first.
    peer.close();
    const owner = (): Promise<{ connected: boolean }[]> => h.sql('select connected from cluster_owners where cluster_uid = $1 and session_id = $2', [c.uid, sessionId]);
    await eventually(async () => (await owner())[0]?.connected === false);
    expect(await h.sql('select 1 from live_sessions where session_id = $1', [sessionId]), 'the session left the fleet poll').toEqual([]);

    await relay().releaseAndReset();
    expect((await owner())[0]?.connected, 'the late check does not show the ended session connected').toBe(false);

    // The operator comes back with a fresh hello: no other operator held the cluster.
    const again = await h.openFresh(c);
    const displacements = await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid]);
    expect(displacements, 'the ended session was not displaced').toEqual([]);
    again.peer.close();
  }, 40_000);
});
