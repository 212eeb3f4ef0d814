/**
 * A cluster's location hint, given at registration and changeable later, is what new session
 * objects for it are created with.
 *
 * What local workerd shows and what only Cloudflare shows: workerd accepts a hint and ignores it
 * (one process, no data centres), and an object cannot see the hint it was created with. So the
 * hub runs here with its real routes, database and session objects, and the only instrument is on
 * the namespace binding: it records the options each `get()` passes on to the real namespace.
 * Where Cloudflare then places the object (the data centre near the hint; best effort, honoured
 * on an object's first `get()` only) can only be observed on Cloudflare.
 */
import { createExecutionContext } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { hubApp } from '../../src/hub/app';
import type { HubEnv } from '../../src/hub/env';
import { uniqueName } from '../support/peer-core';
import { admin, connectVia, hubEnv } from '../workers/support/peer';

interface GetCall {
  id: string;
  locationHint: string | null;
}

/** The hub app over the real bindings, with SESSIONS recording what each get() asks for. */
function instrumentedHub(): { fetch: (req: Request) => Promise<Response>; calls: GetCall[] } {
  const calls: GetCall[] = [];
  const real = hubEnv.SESSIONS;
  const SESSIONS = {
    idFromName: (name: string) => real.idFromName(name),
    get: (id: DurableObjectId, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
      calls.push({ id: id.toString(), locationHint: options?.locationHint ?? null });
      return real.get(id, options);
    },
    // Exactly as the real binding: locally this throws "not implemented in workerd".
    jurisdiction: (j: DurableObjectJurisdiction) => real.jurisdiction(j),
  } as unknown as DurableObjectNamespace;
  const env: HubEnv = { ...hubEnv, SESSIONS };
  const app = hubApp();
  return { fetch: async (req) => app.fetch(req, env, createExecutionContext()), calls };
}

/** The options the hub passed when it addressed this session's object. */
function hintsFor(calls: GetCall[], clusterUid: string, sessionId: string): (string | null)[] {
  const id = sessionStub(hubEnv, { clusterUid, routeKey: routeKeyOf(sessionId) as string }).id.toString();
  return calls.filter((c) => c.id === id).map((c) => c.locationHint);
}

async function register(body: Record<string, unknown>): Promise<{ uid: string; name: string; token: string }> {
  const r = await admin('POST', '/clusters', { name: uniqueName('place'), ...body });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return { uid: r.json.uid, name: r.json.name, token: r.json.enrollment_token };
}

describe('placement of session objects (location hints)', () => {
  it('a hint given at registration is the one a new session object is created with', async () => {
    const c = await register({ location_hint: 'weur' });
    expect((await admin('GET', `/clusters/${c.uid}`)).json.location_hint).toBe('weur');
    const hub = instrumentedHub();
    const peer = await connectVia(hub.fetch, c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    peer.close();
    expect(hintsFor(hub.calls, c.uid, welcome.payload.session_id as string)).toEqual(['weur']);
  });

  it('without a hint, objects are created as before: no placement option at all', async () => {
    const c = await register({});
    const hub = instrumentedHub();
    const peer = await connectVia(hub.fetch, c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    peer.close();
    expect(hintsFor(hub.calls, c.uid, welcome.payload.session_id as string)).toEqual([null]);
  });

  it('a changed hint takes effect at the next connection: a new object, created with the new hint; an unchanged one keeps the object', async () => {
    const c = await register({ location_hint: 'weur' });
    const hub = instrumentedHub();
    const first = await connectVia(hub.fetch, c.token);
    const w1 = await first.hello({ cluster_id: c.name });
    first.close();
    const s1 = w1.payload.session_id as string;

    // Same hint again (or none sent at all): the resume hint still routes to the same object.
    expect((await admin('PATCH', `/clusters/${c.name}`, { location_hint: 'weur' })).status).toBe(200);
    const again = await connectVia(hub.fetch, c.token, s1);
    const w2 = await again.hello({ cluster_id: c.name, session_id: s1 });
    again.close();
    expect(routeKeyOf(w2.payload.session_id as string)).toBe(routeKeyOf(s1));

    const changed = await admin('PATCH', `/clusters/${c.name}`, { location_hint: 'eeur' });
    expect(changed.status).toBe(200);
    expect(changed.json).toMatchObject({ uid: c.uid, location_hint: 'eeur', region: 'eu' });
    const moved = await connectVia(hub.fetch, c.token, s1);
    const w3 = await moved.hello({ cluster_id: c.name, session_id: s1 });
    moved.close();
    const s3 = w3.payload.session_id as string;
    // Placement is fixed when an object is created: a new one, so a fresh session.
    expect(routeKeyOf(s3)).not.toBe(routeKeyOf(s1));
    expect(w3.payload.full_resync).toBe(true);
    expect(hintsFor(hub.calls, c.uid, s3)).toEqual(['eeur']);

    // Cleared: the next new object gets no hint; the hub's view says so.
    const cleared = await admin('PATCH', `/clusters/${c.uid}`, { location_hint: null });
    expect(cleared.json.location_hint).toBeNull();
    const plain = await connectVia(hub.fetch, c.token, s3);
    const w4 = await plain.hello({ cluster_id: c.name, session_id: s3 });
    plain.close();
    expect(routeKeyOf(w4.payload.session_id as string)).not.toBe(routeKeyOf(s3));
    expect(hintsFor(hub.calls, c.uid, w4.payload.session_id as string)).toEqual([null]);
  });

  it('after a placement change, a resume hint the hub could never have minted starts a new object instead of failing', async () => {
    const c = await register({});
    expect((await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'eeur' })).status).toBe(200);
    const hub = instrumentedHub();
    // ULID-shaped, but its time field is beyond what a ULID can hold.
    const forged = `${'Z'.repeat(26)}.${'Z'.repeat(26)}`;
    const peer = await connectVia(hub.fetch, c.token, forged);
    const welcome = await peer.hello({ cluster_id: c.name, session_id: forged });
    peer.close();
    expect(welcome.payload.full_resync).toBe(true);
    expect(routeKeyOf(welcome.payload.session_id as string)).not.toBe('Z'.repeat(26));
    expect(hintsFor(hub.calls, c.uid, welcome.payload.session_id as string)).toEqual(['eeur']);
  });

  it('hints are validated against the documented list, at registration and when changed', async () => {
    const bad = await admin('POST', '/clusters', { name: uniqueName('place'), location_hint: 'mars' });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'invalid', field: 'location_hint' });
    const c = await register({ location_hint: 'eeur' });
    const patchBad = await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'WEUR' });
    expect(patchBad.status).toBe(400);
    expect(patchBad.json.error).toMatchObject({ code: 'invalid', field: 'location_hint' });
    const missing = await admin('PATCH', `/clusters/${c.uid}`, {});
    expect(missing.status).toBe(400);
    expect((await admin('GET', `/clusters/${c.uid}`)).json.location_hint).toBe('eeur');
    expect((await admin('PATCH', '/clusters/no-such-cluster', { location_hint: 'weur' })).status).toBe(404);
  });

  it('a hint outside the eu jurisdiction is refused (400, naming location_hint), at registration and when changed', async () => {
    const name = uniqueName('place');
    const bad = await admin('POST', '/clusters', { name, location_hint: 'wnam' });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'invalid', field: 'location_hint' });
    expect(bad.json.error.message).toMatch(/location hint wnam lies outside jurisdiction eu.*weur, eeur/);
    // Nothing was registered: the name is still free.
    expect((await admin('GET', `/clusters/${name}`)).status).toBe(404);

    const c = await register({ location_hint: 'weur' });
    for (const hint of ['oc', 'enam', 'apac']) {
      const patched = await admin('PATCH', `/clusters/${c.uid}`, { location_hint: hint });
      expect(patched.status).toBe(400);
      expect(patched.json.error).toMatchObject({ code: 'invalid', field: 'location_hint' });
    }
    expect((await admin('GET', `/clusters/${c.uid}`)).json.location_hint).toBe('weur');
    // Clearing the hint is always allowed.
    expect((await admin('PATCH', `/clusters/${c.uid}`, { location_hint: null })).status).toBe(200);
  });

  it('the OpenAPI description documents the hint at registration and the PATCH that changes it', async () => {
    const res = await admin('GET', '/openapi.json');
    const doc = res.json;
    expect(doc.paths['/clusters/{id}'].patch).toBeDefined();
    const create = doc.paths['/clusters'].post.requestBody.content['application/json'].schema;
    expect(JSON.stringify(create)).toContain('weur');
    expect(JSON.stringify(create)).toMatch(/refuses, with 400, a hint outside it.*eu takes weur and eeur/);
    expect(doc.components.schemas.Cluster.properties).toHaveProperty('location_hint');
    expect(doc.components.schemas.Cluster.properties).toHaveProperty('region');
  });
});
