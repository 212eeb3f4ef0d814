/**
 * Disabling a cluster or rotating its token (spec, Authentication: "cuts a live session instead of
 * waiting for the operator to reconnect"). The spec bounds the cut by the ownership poll; the hub
 * does better on both sides of that window:
 * - the admin action pokes the live session, which checks its claim and is cut at once;
 * - a write committed after the revocation is never pushed to the revoked session, even while it
 *   is still open (the poke lost, the poll not yet due): its changes may carry secrets
 *   (`serving.env`) the old token's holder must not see.
 * A review found both (the second with a leaked secret in the frame); each test here failed before.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, useHub } from './support/hub';
import { desired } from '../support/peer-core';

// The production poll interval: the window the poll leaves is what a real deployment has.
const h = useHub({ ...FAST_TIMERS, POLL_INTERVAL_MS: '5000', IDLE_TIMEOUT_MS: '30000' });

const SECRET = { HF_TOKEN: 'hf_new_secret_after_rotation' };
const withSecret = () => desired({ serving: { ...(desired().serving as Record<string, unknown>), env: SECRET } });

/** Revoke in Postgres alone, as an admin action whose poke of the session was lost would leave it. */
async function rotateBehindTheHub(uid: string): Promise<void> {
  await h.sql(`update clusters set token_hash = decode(md5(random()::text) || md5(random()::text), 'hex') where uid = $1`, [uid]);
}

describe('the admin action cuts the live session at once', () => {
  it('rotate-token: the session opened with the old token is refused (4403) well within one poll interval', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const t0 = Date.now();
    expect((await h.admin('POST', `/clusters/${c.name}/rotate-token`)).status).toBe(200);
    const closed = await peer.closedWith(2_500);
    expect({ code: closed.code, within: Date.now() - t0 < 2_500 }).toEqual({ code: CloseCode.REFUSED, within: true });
  });

  it('disable: the live session is refused (4403) well within one poll interval', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    expect((await h.admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    expect((await peer.closedWith(2_500)).code).toBe(CloseCode.REFUSED);
  });
});

describe('writes after a revocation are not pushed to the revoked session', () => {
  it('a PUT after the token changed is not delivered (a PUT before it is)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/before`, desired())).status).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'before');
    await rotateBehindTheHub(c.uid);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/after-rotation`, withSecret())).status).toBe(200);
    // The fleet poll (5 s) cuts the session; until then nothing written after the rotation reaches it.
    expect((await peer.closedWith(12_000)).code).toBe(CloseCode.REFUSED);
    const leaked = peer.frames.filter((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'after-rotation');
    expect(leaked.map((f) => f.payload.serving)).toEqual([]);
  }, 30_000);

  it('a bulk PUT, a withdrawal and an operation after a disable are not delivered', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/kept`, desired())).status).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'kept');
    await h.sql('update clusters set disabled_at = now() where uid = $1', [c.uid]);
    const bulk = await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: [{ ...withSecret(), deployment_id: 'bulk-a' }, { ...desired(), deployment_id: 'bulk-b' }] });
    expect(bulk.status).toBe(200);
    expect((await h.admin('DELETE', `/clusters/${c.name}/deployments/kept`)).status).toBe(200);
    const op = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'replica.restart', target: 'kept', deadline_s: 60 });
    expect(op.status).toBe(202);
    expect((await peer.closedWith(12_000)).code).toBe(CloseCode.REFUSED);
    const after = peer.frames.filter(
      (f) => (f.type === 'deployment.desired' && f.payload.deployment_id !== 'kept') || (f.type === 'deployment.desired' && f.payload.deleted === true) || f.type === 'operation.start',
    );
    expect(after.map((f) => [f.type, f.payload.deployment_id ?? f.payload.operation_id])).toEqual([]);
  }, 30_000);
});
