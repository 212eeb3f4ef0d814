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
import { admin, connectVia, hubEnv, newCluster, sql } from '../workers/support/peer';

interface GetCall {
  id: string;
  locationHint: string | null;
}

/**
 * The hub app over the real bindings, with SESSIONS recording what each get() asks for; `gateway`
 * replaces DB_GATEWAY's binding when a test must act between two of the hub's statements.
 */
function instrumentedHub(gateway?: DurableObjectNamespace): { fetch: (req: Request) => Promise<Response>; calls: GetCall[] } {
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
  const env: HubEnv = { ...hubEnv, SESSIONS, ...(gateway ? { DB_GATEWAY: gateway } : {}) };
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

  it('a hint changed while a connect is between its token lookup and its route key reaches that session at its next connection', async () => {
    const c = await register({ location_hint: 'weur' });
    // DB_GATEWAY as it is, except that the admin's PATCH commits right after this connect's token lookup.
    let patchDuringLookup = true;
    const real = hubEnv.DB_GATEWAY;
    const gateway = {
      idFromName: (n: string) => real.idFromName(n),
      jurisdiction: (j: DurableObjectJurisdiction) => real.jurisdiction(j),
      get: (id: DurableObjectId, options?: DurableObjectNamespaceGetDurableObjectOptions) => {
        const stub = real.get(id, options) as unknown as { query(t: string, p: unknown[], n?: string): Promise<unknown> };
        return {
          query: async (t: string, p: unknown[], n?: string) => {
            const r = await stub.query(t, p, n);
            if (n?.startsWith('wingsmith_token_lookup') && patchDuringLookup) {
              patchDuringLookup = false;
              expect((await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'eeur' })).status).toBe(200);
              // The route key is minted after the change (it once compared the key's time with it).
              await new Promise((res) => setTimeout(res, 5));
            }
            return r;
          },
        };
      },
    } as unknown as DurableObjectNamespace;
    const hub = instrumentedHub(gateway);

    const first = await connectVia(hub.fetch, c.token);
    const s1 = (await first.hello({ cluster_id: c.name })).payload.session_id as string;
    first.close();
    // The race: this object was created with the hint read before the change.
    expect(patchDuringLookup).toBe(false);
    expect(hintsFor(hub.calls, c.uid, s1)).toEqual(['weur']);

    const next = await connectVia(hub.fetch, c.token, s1);
    const w2 = await next.hello({ cluster_id: c.name, session_id: s1 });
    next.close();
    const s2 = w2.payload.session_id as string;
    expect({ sameObject: routeKeyOf(s2) === routeKeyOf(s1), fullResync: w2.payload.full_resync, createdWith: hintsFor(hub.calls, c.uid, s2) }).toEqual({
      sameObject: false,
      fullResync: true,
      createdWith: ['eeur'],
    });
    // And from then on its resume hint routes to that object.
    const third = await connectVia(hub.fetch, c.token, s2);
    const w3 = await third.hello({ cluster_id: c.name, session_id: s2 });
    third.close();
    expect(routeKeyOf(w3.payload.session_id as string)).toBe(routeKeyOf(s2));
  });

  it('a hint stored before the region had its jurisdiction, outside it, is neither passed to get() nor shown as the placement', async () => {
    const c = await newCluster('place');
    // Registered while [env.eu] had no HUB_JURISDICTION: wnam was accepted then, as on the default deployment.
    await sql('update clusters set location_hint = $2 where uid = $1', [c.uid, 'wnam']);
    const hub = instrumentedHub();
    const peer = await connectVia(hub.fetch, c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    peer.close();
    const view = (await admin('GET', `/clusters/${c.uid}`)).json;
    const listed = (await admin('GET', '/clusters?limit=500')).json.items.find((x: { uid: string }) => x.uid === c.uid);
    expect({
      hintsPassedToEuObject: hintsFor(hub.calls, c.uid, welcome.payload.session_id as string),
      view: { jurisdiction: view.jurisdiction, location_hint: view.location_hint, location_hint_ignored: view.location_hint_ignored },
      listed: { location_hint: listed.location_hint, location_hint_ignored: listed.location_hint_ignored },
    }).toEqual({
      hintsPassedToEuObject: [null],
      view: { jurisdiction: 'eu', location_hint: null, location_hint_ignored: 'wnam' },
      listed: { location_hint: null, location_hint_ignored: 'wnam' },
    });
    // The same hint is refused when asked for now; one inside the jurisdiction replaces it.
    expect((await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'wnam' })).status).toBe(400);
    const fixed = (await admin('PATCH', `/clusters/${c.uid}`, { location_hint: 'weur' })).json;
    expect(fixed).toMatchObject({ location_hint: 'weur' });
    expect(fixed).not.toHaveProperty('location_hint_ignored');
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
