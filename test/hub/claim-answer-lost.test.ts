/**
 * A claim whose TCP connection to Postgres is reset after it committed, before its answer reached
 * the hub: the hello is refused 1013 (the claim's outcome is unknown), but the claim granted a
 * fresh session id that no connection will ever carry. It must not be shown connected, and the
 * operator's next hello (fresh too: it was never welcomed) must not be recorded as taking the
 * cluster from it: no other operator ever held the cluster.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { FAST_TIMERS } from './support/hub';

/** The claim's prepared statement, as its Parse and Bind messages name it (ownership.ts). */
const CLAIM_STATEMENT = Buffer.from('wingsmith_claim_v4');
/** ReadyForQuery (idle): the end of a statement's answer. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

interface ResetRelay {
  port: number;
  /** Reset the link of the next claim once its answer (sent after its commit) arrives, unforwarded. */
  resetNextClaimAnswer(): Promise<void>;
  close(): void;
}

/** A TCP relay in front of Postgres that passes everything through, but can reset one link at a chosen point. */
async function startResetRelay(target: { host: string; port: number }): Promise<ResetRelay> {
  const sockets = new Set<net.Socket>();
  let armed: (() => void) | null = null;
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    sockets.add(client);
    sockets.add(upstream);
    let answer: Buffer[] | null = null;
    let onReset: (() => void) | null = null;
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.includes(CLAIM_STATEMENT)) {
        answer = [];
        onReset = armed;
        armed = null;
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
      onReset?.();
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
    resetNextClaimAnswer: () => new Promise<void>((r) => (armed = r)),
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000' }, startResetRelay);

describe('a claim whose connection is reset after its commit, before its answer', () => {
  it("the refused claim's session is not shown connected, and the operator's next fresh hello is not recorded as displacing it", async () => {
    const c = await h.newCluster('reset-claim');
    const first = await h.connect(c.token);
    const reset = relay().resetNextClaimAnswer();
    first.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: null, resume_from: null, lossy: false });
    await reset;
    expect((await first.closedWith(10_000)).code, 'refused: the claim may or may not have committed').toBe(1013);
    expect(first.frames.map((f) => f.type)).not.toContain('welcome');
    const owners = await h.sql<{ session_id: string; connected: boolean }>('select session_id, connected from cluster_owners where cluster_uid = $1', [c.uid]);
    expect(owners, 'the claim committed').toHaveLength(1);
    expect(owners[0]?.connected, 'no connection carries the refused claim').toBe(false);

    // The operator tries again, as told: a fresh hello (it has no session to resume).
    const { peer, sessionId } = await h.openFresh(c);
    expect(sessionId).not.toBe(owners[0]?.session_id);
    const displacements = await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid]);
    expect(displacements, 'no other operator ever held the cluster').toEqual([]);
    peer.close();
  }, 40_000);
});
