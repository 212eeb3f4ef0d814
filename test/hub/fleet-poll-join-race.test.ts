/**
 * A session that joins the fleet poll (its claim's `ensurePolling`) while its shard's poller is
 * running a poll that found the shard empty must still be polled every POLL_INTERVAL_MS. That poll
 * read the shard before the claim committed, so it answers "no session left"; were its answer to
 * decide the next alarm, the poller would sleep until its next history retention pass
 * (HISTORY_PRUNE_INTERVAL_MS, 10 minutes), overriding the alarm the join had just set, and nothing
 * would look at the new session meanwhile: desired state written straight into Postgres by
 * another plane component (no poke) would not reach it, nor a revocation whose poke was lost.
 *
 * The race is made certain, not hoped for: the hub reaches Postgres through a relay of the test's
 * own that holds the answer to the first fleet poll that finds the shard empty (the statement has
 * run on the server; only its answer waits), while a new operator connects.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { desired, eventually, FAST_TIMERS, sleep } from './support/hub';

/** The fleet poll's prepared statement, as its Parse and Bind messages name it (fleet-poll.ts). */
const POLL_STATEMENT = Buffer.from('wingsmith_fleet_poll_v5');
/**
 * The poll's answer for an empty shard: one DataRow of four columns, three NULLs (no session to
 * poke) and `any_live` false, in the text format.
 */
const EMPTY_SHARD_ROW = Buffer.from([0, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x66]);
/** ReadyForQuery (idle): the end of a statement's answer. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

interface PollHoldRelay {
  port: number;
  /** Resolves once the answer of a poll that found the shard empty is being held. */
  held: Promise<void>;
  release(): void;
  close(): void;
}

/**
 * A TCP relay in front of Postgres that passes everything through, except that it holds the
 * answer to the first fleet poll statement that finds the shard empty, until `release()`.
 */
async function startPollHoldRelay(target: { host: string; port: number }): Promise<PollHoldRelay> {
  const sockets = new Set<net.Socket>();
  let armed = true;
  let releaseHeld: (() => void) | null = null;
  let released = false;
  let onHeld: () => void = () => undefined;
  const held = new Promise<void>((r) => (onHeld = r));
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    sockets.add(client);
    sockets.add(upstream);
    let pollAnswer: Buffer[] | null = null;
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.includes(POLL_STATEMENT)) pollAnswer = [];
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (pollAnswer === null) return void client.write(chunk);
      pollAnswer.push(chunk);
      const answer = Buffer.concat(pollAnswer);
      if (!answer.subarray(-READY.length).equals(READY)) return;
      pollAnswer = null;
      const deliver = () => {
        if (!client.destroyed) client.write(answer);
      };
      if (armed && answer.includes(EMPTY_SHARD_ROW)) {
        armed = false;
        if (released) return deliver();
        releaseHeld = deliver;
        onHeld();
        return;
      }
      deliver();
    });
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
      a.on('end', () => b.end());
      a.on('error', () => b.destroy());
      a.on('close', () => sockets.delete(a));
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const release = () => {
    released = true;
    releaseHeld?.();
    releaseHeld = null;
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    held,
    release,
    close: () => {
      release();
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

const POLL = 500;
const { h, relay } = useHubBehindRelay(
  // One shard: the cluster's two sessions share one poller. The history retention pass keeps its
  // default interval (10 minutes): an idle poller's next alarm. The held poll must not time out
  // while the second operator connects (a failed poll polls again at the interval).
  { ...FAST_TIMERS, POLL_INTERVAL_MS: String(POLL), IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000', DB_GATEWAY_SHARDS: '1', PG_QUERY_TIMEOUT_MS: '10000' },
  startPollHoldRelay,
);

describe('joining the fleet poll while a poll of the empty shard is in flight', () => {
  it('the new session is still polled: desired state written straight into Postgres (no poke) reaches its operator', async () => {
    const c = await h.newCluster('join-race');
    const first = await h.openFresh(c);
    // A few polls while it is connected: the poller's first one also ran its history retention
    // pass, so the poller's next pass is 10 minutes away (what an idle poller sleeps until).
    await sleep(4 * POLL);
    // The shard's only session leaves: the poll after its disconnect finds the shard empty, and
    // its answer is held.
    first.peer.close();
    const held = await Promise.race([relay().held.then(() => true), sleep(20 * POLL).then(() => false)]);
    expect(held, 'a poll found the shard empty after its only session left').toBe(true);
    // A new operator connects meanwhile: its claim commits after that poll read the shard, and
    // its join reaches the poller while the poll waits for its answer.
    const second = await h.openFresh(c);
    relay().release();
    await eventually(async () => (await h.sql('select 1 from live_sessions where session_id = $1', [second.sessionId])).length === 1);

    // Another plane component writes desired state: only the fleet poll can tell the session.
    await h.sql(
      `with rev as (update clusters set desired_revision = desired_revision + 1 where uid = $1 returning uid, desired_revision)
       insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving)
       select uid, 'from-elsewhere', 'w', desired_revision, 1, 1, $2::jsonb from rev`,
      [c.uid, JSON.stringify(desired().serving)],
    );
    const f = await second.peer.next((x) => x.type === 'deployment.desired', 20 * POLL).catch(() => null);
    expect(f?.payload, 'the change written with no poke reached the session within 20 poll intervals').toMatchObject({ deployment_id: 'from-elsewhere' });
    second.peer.close();
  }, 60_000);
});
