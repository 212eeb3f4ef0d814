import { createExecutionContext, listDurableObjectIds, waitOnExecutionContext } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { hubApp } from '../../src/hub/app';
import { hubConfig } from '../../src/hub/config';
import { generateEnrollmentToken } from '../../src/hub/tokens';
import { admin, connect, connectVia, hubEnv, newCluster, worker } from './support/peer';

/** The token with its last check character changed (never to itself: a fixed 'x' left one token in 62 valid). */
function corruptCheck(token: string): string {
  const last = token.at(-1);
  return token.slice(0, -1) + (last === 'x' ? 'y' : 'x');
}

describe('admission (spec: Authentication)', () => {
  it('no bearer, or a bearer not shaped like an enrollment token, gets HTTP 401 with a JSON body before any upgrade', async () => {
    for (const auth of [undefined, 'Bearer nope', `Bearer ${hubEnv.ADMIN_TOKEN}`, 'Basic abc', `Bearer ${corruptCheck(generateEnrollmentToken())}`]) {
      const res = await worker.fetch('http://hub.test/v1/connect', {
        headers: { upgrade: 'websocket', ...(auth ? { authorization: auth } : {}) },
      });
      expect(res.status, auth).toBe(401);
      expect(res.webSocket).toBeNull();
      expect(await res.json()).toMatchObject({ error: { code: 'unauthorized' } });
    }
  });

  it('the scheme name is case-insensitive (RFC 9110: "bearer", "BEARER"), as the admin API takes it', async () => {
    const c = await newCluster();
    for (const scheme of ['bearer', 'BEARER']) {
      const viaScheme = (req: Request) => {
        const headers = new Headers(req.headers);
        headers.set('authorization', `${scheme} ${c.token}`);
        return worker.fetch(new Request(req.url, { headers }));
      };
      const peer = await connectVia(viaScheme, c.token);
      const welcome = await peer.hello({ cluster_id: c.name });
      expect(welcome.type, scheme).toBe('welcome');
      peer.close();
      await peer.closed;
    }
  });

  it('a HEAD asking for an upgrade is 405 (Allow: GET) before any database or session work, not a 101 the runtime cannot send on a HEAD', async () => {
    // Straight into the app: workerd's fetch() turns any upgrade request into a GET (so does
    // Miniflare's entry worker locally), but a deployment's edge hands the Worker the method sent.
    const c = await newCluster();
    const before = (await listDurableObjectIds(hubEnv.SESSIONS)).length;
    const ctx = createExecutionContext();
    const res = await hubApp().fetch(
      new Request('http://hub.test/v1/connect', { method: 'HEAD', headers: { upgrade: 'websocket', authorization: `Bearer ${c.token}` } }),
      hubEnv,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expect({ status: res.status, allow: res.headers.get('allow'), ws: res.webSocket }).toEqual({ status: 405, allow: 'GET', ws: null });
    expect((await listDurableObjectIds(hubEnv.SESSIONS)).length).toBe(before);
    // The GET of the same operator is admitted.
    const peer = await connect(c.token);
    expect((await peer.hello({ cluster_id: c.name })).type).toBe('welcome');
    peer.close();
    await peer.closed;
  });

  it('a well-shaped token that is unknown is refused with an error frame (retryable false) and 4403, and no session object is created', async () => {
    const before = (await listDurableObjectIds(hubEnv.SESSIONS)).length;
    const peer = await connect(generateEnrollmentToken());
    const err = await peer.next();
    expect(err).toMatchObject({ type: 'error', seq: null, payload: { code: 'not_found', retryable: false } });
    expect((await peer.closedWith()).code).toBe(CloseCode.REFUSED);
    expect((await listDurableObjectIds(hubEnv.SESSIONS)).length).toBe(before);
  });

  it('a disabled cluster is refused with 4403; enabling it admits it again', async () => {
    const c = await newCluster();
    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    const refused = await connect(c.token);
    expect(await refused.next()).toMatchObject({ type: 'error', payload: { code: 'conflict', retryable: false } });
    expect((await refused.closedWith()).code).toBe(CloseCode.REFUSED);
    expect((await admin('POST', `/clusters/${c.uid}/enable`)).status).toBe(200);
    const peer = await connect(c.token);
    await peer.hello({ cluster_id: c.name });
    peer.close();
  });

  it('a rotated-away token is refused with 4403; the new one is admitted', async () => {
    const c = await newCluster();
    const rotated = await admin('POST', `/clusters/${c.name}/rotate-token`);
    expect(rotated.status).toBe(200);
    const old = await connect(c.token);
    expect((await old.next()).type).toBe('error');
    expect((await old.closedWith()).code).toBe(CloseCode.REFUSED);
    const peer = await connect(rotated.json.enrollment_token);
    await peer.hello({ cluster_id: c.uid });
    peer.close();
  });

  it('a rotation tells the live session the same error code as the next connect with the old token', async () => {
    // An operator's code that branches on the error must not see one rotation as one thing on the
    // live link and another when it dials again with the same token.
    const c = await newCluster();
    const live = await connect(c.token);
    await live.hello({ cluster_id: c.name });
    expect((await admin('POST', `/clusters/${c.name}/rotate-token`)).status).toBe(200);
    const cut = await live.next((f) => f.type === 'error');
    expect((await live.closedWith()).code).toBe(CloseCode.REFUSED);
    const again = await connect(c.token);
    const refused = await again.next();
    expect(refused).toMatchObject({ type: 'error', payload: { code: 'not_found', retryable: false } });
    expect(cut.payload).toMatchObject({ code: 'not_found', retryable: false, message: 'enrollment token was rotated' });
  });
});

describe('handshake (spec: Connection lifecycle)', () => {
  it('hello is answered with welcome: a fresh session with ack_seq 0, full_resync, the hub version and limits', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    expect(welcome.payload).toMatchObject({
      ack_seq: 0,
      full_resync: true,
      hub_version: hubEnv.HUB_VERSION,
      limits: { max_frame_bytes: expect.any(Number), replay_buffer_frames: expect.any(Number) },
    });
    expect(welcome.payload.session_id).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}\.[0-9A-HJKMNP-TV-Z]{26}$/);
    peer.close();
  });

  it('hello.cluster_id may name the cluster by uid or by name', async () => {
    const c = await newCluster();
    const a = await connect(c.token);
    await a.hello({ cluster_id: c.uid });
    a.close();
    const b = await connect(c.token);
    await b.hello({ cluster_id: c.name });
    b.close();
  });

  it('the token, not hello, decides the cluster: a hello naming another cluster is a protocol error (4400)', async () => {
    const mine = await newCluster();
    const other = await newCluster();
    const peer = await connect(mine.token);
    peer.send('hello', { cluster_id: other.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    expect(await peer.next()).toMatchObject({ type: 'error', payload: { code: 'invalid', retryable: false } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('hello is always the first frame: anything else first is a protocol error (error frame, 4400)', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    peer.send('ping', {});
    const err = await peer.next();
    expect(err).toMatchObject({ type: 'error', payload: { code: 'invalid' } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('hello is never sent again on the same connection: a second hello is a protocol error (4400)', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    await peer.hello({ cluster_id: c.name });
    peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    expect(await peer.next((f) => f.type === 'error')).toMatchObject({ payload: { code: 'invalid' } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('a release-shaped operator_version outside the plane major is refused with retryable false and 4400', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    peer.send('hello', { cluster_id: c.name, operator_version: 'v7.0.0', session_id: null, resume_from: null, lossy: false });
    expect(await peer.next()).toMatchObject({ type: 'error', payload: { code: 'invalid', retryable: false } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('a version that is not release-shaped (a source build) is admitted', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name, operator_version: 'dev-3f9c2ab' });
    expect(welcome.type).toBe('welcome');
    peer.close();
  });

  it('a hello that is not JSON is a protocol error with reply_to null', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    peer.sendRaw('{"v":1,');
    expect(await peer.next()).toMatchObject({ type: 'error', reply_to: null });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('a connection that has not completed the handshake in time is closed with 4408', async () => {
    const c = await newCluster();
    const peer = await connect(c.token);
    const started = Date.now();
    const closed = await peer.closedWith(hubConfig(hubEnv).HANDSHAKE_TIMEOUT_MS + 5_000);
    expect(closed.code).toBe(CloseCode.TIMEOUT);
    expect(Date.now() - started).toBeGreaterThanOrEqual(hubConfig(hubEnv).HANDSHAKE_TIMEOUT_MS - 100);
  });
});
