/**
 * The default deployment (wrangler.toml's top level, no HUB_REGION) behaves exactly as before
 * regions existed: no jurisdiction, no region in the welcome, today's refusal message.
 */
import { listDurableObjectIds, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { hubConfig } from '../../src/hub/config';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { admin, connect, hubEnv, newCluster } from './support/peer';

describe('the default deployment (no region)', () => {
  it('names no region and creates its session objects in no jurisdiction, by their plain names', async () => {
    expect(hubConfig(hubEnv).HUB_REGION).toBeUndefined();
    const c = await newCluster();
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    peer.close();
    expect(welcome.payload).not.toHaveProperty('region');
    const key = routeKeyOf(welcome.payload.session_id as string) as string;
    const plain = hubEnv.SESSIONS.idFromName(`${c.uid}/${key}`);
    expect(sessionStub(hubEnv, { clusterUid: c.uid, routeKey: key }).id.toString()).toBe(plain.toString());
    expect((await listDurableObjectIds(hubEnv.SESSIONS)).map((id) => id.toString())).toContain(plain.toString());
    expect(await runInDurableObject(sessionStub(hubEnv, { clusterUid: c.uid, routeKey: key }), (_i, s) => s.id.jurisdiction ?? null)).toBeNull();
  });

  it('refuses an unknown token with the same message as before', async () => {
    const peer = await connect(generateEnrollmentToken());
    expect((await peer.next()).payload.message).toBe('enrollment token is not valid (unknown or rotated)');
  });

  it('shows region and jurisdiction as null in the cluster view, and takes a location hint like any deployment', async () => {
    const c = await newCluster();
    expect((await admin('GET', `/clusters/${c.uid}`)).json).toMatchObject({ region: null, jurisdiction: null, location_hint: null });
    const patched = await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'enam' });
    expect(patched.status).toBe(200);
    expect(patched.json).toMatchObject({ region: null, location_hint: 'enam' });
  });
});
