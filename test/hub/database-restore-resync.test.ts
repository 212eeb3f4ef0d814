import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, device, useHub, type Frame, type Peer, type TestCluster } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
const h = useHub();

/**
 * The plane's Postgres restored to an earlier point (a backup, point-in-time recovery), modelled
 * by saving a cluster's rows at the backup point and writing them back: its desired revision
 * counter and deployments, its claim (session id, generation, how far the session's operator
 * stream is applied), its GPUs and its fleet-poll registration.
 * The session object keeps what it sent since (its watermark, its replay buffer).
 */
interface Backup {
  uid: string;
  revision: string;
  deployments: unknown[];
  devices: unknown[];
  owner: { session_id: string; generation: string; ingest_commits: string };
  live: { session_id: string; generation: string; seen_revision: string }[];
}

async function backup(uid: string): Promise<Backup> {
  const [c] = await h.sql<{ desired_revision: string }>('select desired_revision from clusters where uid = $1', [uid]);
  const deployments = await h.sql('select * from desired_deployments where cluster_uid = $1', [uid]);
  const devices = await h.sql('select * from devices where cluster_uid = $1', [uid]);
  const [owner] = await h.sql<Backup['owner']>('select session_id, generation, ingest_commits from cluster_owners where cluster_uid = $1', [uid]);
  const live = await h.sql<Backup['live'][number]>('select session_id, generation, seen_revision from live_sessions where cluster_uid = $1', [uid]);
  if (!c || !owner) throw new Error('nothing to back up');
  return { uid, revision: c.desired_revision, deployments, devices, owner, live };
}

async function restore(b: Backup): Promise<void> {
  await h.sql('update clusters set desired_revision = $2 where uid = $1', [b.uid, b.revision]);
  await h.sql('delete from desired_deployments where cluster_uid = $1', [b.uid]);
  await h.sql('insert into desired_deployments select * from jsonb_populate_recordset(null::desired_deployments, $1::jsonb)', [JSON.stringify(b.deployments)]);
  await h.sql('delete from devices where cluster_uid = $1', [b.uid]);
  await h.sql('insert into devices select * from jsonb_populate_recordset(null::devices, $1::jsonb)', [JSON.stringify(b.devices)]);
  await h.sql('update cluster_owners set session_id = $2, generation = $3, ingest_commits = $4 where cluster_uid = $1', [
    b.uid,
    b.owner.session_id,
    b.owner.generation,
    b.owner.ingest_commits,
  ]);
  for (const l of b.live) {
    await h.sql('update live_sessions set generation = $2, seen_revision = $3 where session_id = $1', [l.session_id, l.generation, l.seen_revision]);
  }
}

/** GPU-1 reported and applied before the backup point, GPU-2 after it. */
async function reportAroundBackup(peer: Peer, uid: string): Promise<Backup> {
  peer.send('device.observed', device('GPU-1'));
  await peer.ackedThrough(peer.nextSeq - 1);
  const b = await backup(uid);
  peer.send('device.observed', device('GPU-2'));
  await peer.ackedThrough(peer.nextSeq - 1);
  return b;
}

/** The operator reconnects asking to resume `sessionId`: it gets a fresh session and a full resync. */
async function expectFreshOnReconnect(c: TestCluster, peer: Peer, sessionId: string): Promise<void> {
  const again = await h.connect(c.token, sessionId);
  const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
  expect(welcome.payload.full_resync).toBe(true);
  expect(welcome.payload.session_id).not.toBe(sessionId);
  again.close();
}

/** The hub's resync stream after a welcome: the live deployments it carries, by id. */
async function resyncDeployments(peer: Peer): Promise<Record<string, number>> {
  const begin = await peer.next((f) => f.type === 'resync.begin');
  const out: Record<string, number> = {};
  for (;;) {
    const f: Frame = await peer.next((x) => x.reply_to === begin.id);
    if (f.type === 'stream.end') return out;
    if (f.type === 'deployment.desired' && f.payload.deleted === false) out[f.payload.deployment_id as string] = f.payload.revision as number;
  }
}

async function putDesired(c: TestCluster, id: string, min: number): Promise<number> {
  const r = await h.admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired({ min_replicas: min, max_replicas: min }));
  expect(r.status).toBe(200);
  return r.json.revision as number;
}

describe('the hub database restored from a backup while sessions carry newer state', () => {
  it('a live session that sent revisions the database no longer has is cut, and its reconnect resyncs to exactly the restored state plus what was written since', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    // An operator alive all along pings: the cut must be the restore's, never the silence rule's.
    const pings = setInterval(() => peer.send('ping', {}, { ack: null }), 500);
    let closed;
    let r1: number;
    let rNew: number;
    try {
      r1 = await putDesired(c, 'd1', 1);
      await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === r1);
      // The backup point: the session's claim is already what it is now.
      const b = await backup(c.uid);
      await putDesired(c, 'd1', 2);
      const r3 = await putDesired(c, 'd2', 3);
      await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === r3);

      await restore(b);
      // Numbered from the restored counter: at or below what the session already sent.
      rNew = await putDesired(c, 'd3', 4);
      expect(rNew).toBe(r1 + 1);

      // Left alone, the session would never send it (nor withdraw d2): it must be cut, and resumable.
      closed = await peer.closedWith(8_000);
    } finally {
      clearInterval(pings);
    }
    expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(welcome.payload.full_resync).toBe(true);
    expect(welcome.payload.session_id).not.toBe(sessionId);
    // d1 as restored, d3 as written after the restore; d2 (written after the backup point) gone.
    expect(await resyncDeployments(again)).toEqual({ d1: r1, d3: rNew });
    // And the changes after it are delivered.
    const rNext = await putDesired(c, 'd1', 5);
    const f = await again.next((x) => x.type === 'deployment.desired' && x.payload.deployment_id === 'd1');
    expect(f.payload).toMatchObject({ revision: rNext, min_replicas: 5 });
    again.close();
  });

  it('a session that reconnects after the restore, naming the claim the backup holds, is not resumed: it resyncs', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const r1 = await putDesired(c, 'd1', 1);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === r1);
    const b = await backup(c.uid);
    const r2 = await putDesired(c, 'd2', 2);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === r2);
    peer.close();
    await peer.closed;

    await restore(b);
    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(welcome.payload.full_resync).toBe(true);
    expect(lines.some((l) => l.level === 'error' && l.msg.startsWith('the database went back (restored from a backup?): the session is not resumed') && l.session === sessionId)).toBe(true);
    expect(await resyncDeployments(again)).toEqual({ d1: r1 });
    const rNew = await putDesired(c, 'd3', 3);
    expect(rNew).toBe(r2);
    const f = await again.next((x) => x.type === 'deployment.desired' && x.payload.deployment_id === 'd3');
    expect(f.payload.revision).toBe(rNew);
    again.close();
  });

  // Before migration 0027 only the desired counter could tell: a cluster whose desired revision
  // did not move since the backup point was resumed, and the GPUs its operator reported after
  // that point stayed lost (the operator had their acks and never sent them again).
  it('a session that reported observed state after the backup point, with no desired change since, is not resumed: it resyncs', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const b = await reportAroundBackup(peer, c.uid);
    peer.close();
    await peer.closed;

    await restore(b);
    expect((await h.sql('select device_id from devices where cluster_uid = $1', [c.uid])).map((d: any) => d.device_id)).toEqual(['GPU-1']);
    await expectFreshOnReconnect(c, peer, sessionId);
    expect(lines.find((l) => l.msg.startsWith('the database went back (restored from a backup?): the session is not resumed') && l.session === sessionId)).toMatchObject({ level: 'error', ingest_commits: 2 });
  });

  it('a live session whose reports after the backup point are gone is cut at its next frame, which writes nothing, and its reconnect resyncs', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const pings = setInterval(() => peer.send('ping', {}, { ack: null }), 500);
    let closed;
    let last: number;
    try {
      const b = await reportAroundBackup(peer, c.uid);

      await restore(b);
      peer.send('device.observed', device('GPU-3'));
      last = peer.nextSeq - 1;
      closed = await peer.closedWith(8_000);
    } finally {
      clearInterval(pings);
    }
    expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(closed.reason).toMatch(/went back/);
    // Not applied: the operator still holds it, and sends its whole state to the fresh session.
    expect(peer.lastAck() ?? 0).toBeLessThan(last);
    expect((await h.sql('select device_id from devices where cluster_uid = $1', [c.uid])).map((d: any) => d.device_id)).toEqual(['GPU-1']);
    expect(lines.some((l) => l.level === 'error' && l.msg.startsWith('the database went back: it holds fewer') && l.session === sessionId)).toBe(true);

    await expectFreshOnReconnect(c, peer, sessionId);
  });

  // An operator with nothing new to report only pings, and the runtime answers its pings: no
  // ingest statement of its session comes to find the restore, so the session's check (the fleet
  // poll's poke at an admin write, or its sweep every LIVE_SWEEP_MS) must.
  it('a live session that only pings after the restore is cut by its next check, and its reconnect resyncs', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const pings = setInterval(() => peer.send('ping', {}, { ack: null }), 500);
    let closed;
    try {
      const b = await reportAroundBackup(peer, c.uid);

      await restore(b);
      // A change above anything the session sent: its desired side did not go back.
      const r = await putDesired(c, 'd1', 1);
      expect(r).toBeGreaterThan(Number(b.revision));
      closed = await peer.closedWith(8_000);
    } finally {
      clearInterval(pings);
    }
    expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(lines.some((l) => l.level === 'error' && l.msg.startsWith('the database went back: it holds fewer') && l.session === sessionId && l.database_ingest_commits !== undefined)).toBe(true);

    await expectFreshOnReconnect(c, peer, sessionId);
  });
});
