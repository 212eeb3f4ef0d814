/**
 * Frames an operator controls every byte of, found by a conformance audit (2026-12-03): each one
 * must be counted and acknowledged (or refused with a typed error and 4400 where the envelope
 * itself is unreadable), and must change nothing outside its own session.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode, newId, readFrame, ULID_RE } from '../../src/protocol';
import { node, sleep, useHub } from './support/hub';

const h = useHub();
const nodesOf = async (uid: string) => (await h.sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => r.node_id);

describe('hostile frames: a reply_to naming an Object.prototype member', () => {
  it('a poison frame with reply_to "__proto__" is recorded, and the admin API and other clusters keep working', async () => {
    const a = await h.newCluster();
    const b = await h.newCluster();
    const { peer } = await h.openFresh(a);
    peer.sendRaw(
      JSON.stringify({ v: 1, type: 'node.observed', id: newId(), seq: 1, ack: peer.hubCursor, reply_to: '__proto__', ts: new Date().toISOString(), payload: node('n1') }),
    );
    peer.nextSeq = 2;
    await peer.ackedThrough(1);
    expect(await h.sql('select reason from rejections where cluster_uid = $1', [a.uid])).toEqual([{ reason: 'envelope reply_to is not a ULID' }]);
    // The isolate is shared: a count written onto Object.prototype broke every JSON answer.
    for (const path of [`/clusters/${b.name}`, `/clusters/${a.name}/nodes`, '/openapi.json']) {
      const res = await fetch(`${h.hub.url}/admin${path}`, { headers: { authorization: `Bearer ${h.hub.adminToken}` } });
      expect(res.status, `GET /admin${path}: ${(await res.text()).slice(0, 120)}`).toBe(200);
    }
    const other = await h.openFresh(b);
    other.peer.send('node.observed', node('m1'));
    await other.peer.ackedThrough(1);
    other.peer.close();
    peer.close();
  });
});

describe('hostile frames: payloads the checks must not choke on', () => {
  it('a frame whose unknown payload field nests 100,000 deep (with a \\u escape in the text) is applied and acked; the next frame is no gap', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const depth = 100_000;
    const payload = JSON.stringify(node('n1')).replace(/\}$/, `,"zz_future":${'['.repeat(depth)}${']'.repeat(depth)},"note":"\\u006e"}`);
    peer.sendRaw(`{"v":1,"type":"node.observed","id":"${newId()}","seq":1,"ack":${peer.hubCursor},"reply_to":null,"ts":"${new Date().toISOString()}","payload":${payload}}`);
    peer.nextSeq = 2;
    peer.send('node.observed', node('n2'));
    await peer.ackedThrough(2);
    expect(peer.isClosed).toBe(false);
    // Unknown fields are ignored: n1 is applied, not refused.
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2']);
    peer.close();
  });

  it('a sequenced frame with no payload at all is a poison frame: counted, acked, recorded; not a 4400', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.observed', id: newId(), seq: 1, ack: peer.hubCursor, reply_to: null, ts: new Date().toISOString() }));
    peer.nextSeq = 2;
    peer.send('node.observed', node('n2'));
    await peer.ackedThrough(2);
    expect(peer.isClosed).toBe(false);
    expect(await h.sql('select seq, reason from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', reason: 'payload is not a JSON object' }]);
    expect(await nodesOf(c.uid)).toEqual(['n2']);
    peer.close();
  });
});

describe('hostile frames: envelope fields of the wrong kind', () => {
  it('an id, reply_to or ts that is not a string (or overlong) makes a poison frame, and an empty or overlong type an unknown one: each counted, acked and answered; the link stays up', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const frame = (seq: number, over: Record<string, unknown>) =>
      JSON.stringify({ v: 1, type: 'node.observed', id: newId(), seq, ack: peer.hubCursor, reply_to: null, ts: new Date().toISOString(), payload: node(`n${seq}`), ...over });
    const bad: Record<string, unknown>[] = [{ id: 5 }, { id: 'A'.repeat(65) }, { reply_to: 7 }, { reply_to: { id: 1 } }, { ts: 1_733_000_000_000 }, { ts: ['2026-12-04T00:00:00.000Z'] }];
    for (const [i, over] of bad.entries()) peer.sendRaw(frame(i + 1, over));
    const emptyType = newId();
    const longType = newId();
    peer.sendRaw(frame(bad.length + 1, { id: emptyType, type: '' }));
    peer.sendRaw(frame(bad.length + 2, { id: longType, type: 'x.'.repeat(300) }));
    peer.nextSeq = bad.length + 3;
    peer.send('node.observed', node('good'));
    await peer.ackedThrough(bad.length + 3);
    expect(peer.isClosed).toBe(false);
    const reasons = await h.sql<{ seq: string; reason: string }>('select seq, reason from rejections where cluster_uid = $1 order by seq::int', [c.uid]);
    expect(reasons.map((r) => r.reason)).toEqual([
      'envelope id is not a ULID',
      'envelope id is not a ULID',
      'envelope reply_to is not a ULID',
      'envelope reply_to is not a ULID',
      'envelope ts is not an RFC 3339 timestamp',
      'envelope ts is not an RFC 3339 timestamp',
      'unknown message type ',
      `unknown message type ${'x.'.repeat(300)}`,
    ]);
    const unknownEmpty = await peer.next((f) => f.type === 'error' && f.reply_to === emptyType);
    expect(unknownEmpty.payload).toMatchObject({ code: 'invalid', retryable: false, unknown_type: '' });
    const unknownLong = await peer.next((f) => f.type === 'error' && f.reply_to === longType);
    expect(unknownLong.payload).toMatchObject({ code: 'invalid', unknown_type: 'x.'.repeat(128) });
    expect(await nodesOf(c.uid)).toEqual(['good']);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.session.live.counters).toMatchObject({ unknownTypes: 2, rejections: 6 });
    peer.close();
  });
});

describe('hostile frames: __proto__ keys', () => {
  it('an unknown payload field named __proto__ is ignored like any unknown field: applied, not refused', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const payload = JSON.stringify(node('n1')).replace(/^\{/, '{"__proto__":{"x":1},');
    peer.sendRaw(`{"v":1,"type":"node.observed","id":"${newId()}","seq":1,"ack":${peer.hubCursor},"reply_to":null,"ts":"${new Date().toISOString()}","payload":${payload}}`);
    peer.nextSeq = 2;
    await peer.ackedThrough(1);
    expect(await h.sql('select reason from rejections where cluster_uid = $1', [c.uid])).toEqual([]);
    expect(await nodesOf(c.uid)).toEqual(['n1']);
    peer.close();
  });

  it('a __proto__ label is still refused: the label would vanish with no error', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const payload = JSON.stringify({ ...node('n1'), labels: { zone: 'a' } }).replace('"zone":"a"', '"__proto__":"a"');
    peer.sendRaw(`{"v":1,"type":"node.observed","id":"${newId()}","seq":1,"ack":${peer.hubCursor},"reply_to":null,"ts":"${new Date().toISOString()}","payload":${payload}}`);
    peer.nextSeq = 2;
    await peer.ackedThrough(1);
    expect(await h.sql('select reason from rejections where cluster_uid = $1', [c.uid])).toEqual([{ reason: 'payload key payload.labels.__proto__ is not allowed' }]);
    expect(await nodesOf(c.uid)).toEqual([]);
    peer.close();
  });
});

describe("hostile frames: a protocol error quoting the peer's own text", () => {
  const frame = (type: string, seq: number | null) =>
    JSON.stringify({ v: 1, type, id: newId(), seq, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {} });

  it('a first frame whose type is 64 × "é" (not hello) gets an error and a 4400 at once: a close reason is cut to 123 bytes of UTF-8, not 120 characters (the socket refused the close and stayed open until the handshake deadline, 4408)', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const t0 = Date.now();
    peer.sendRaw(frame('é'.repeat(64), 1));
    expect((await peer.next(() => true, 3_000)).type).toBe('error');
    const closed = await peer.closedWith(5_000);
    expect({ code: closed.code, within1s: Date.now() - t0 < 1_000 }).toEqual({ code: CloseCode.PROTOCOL_ERROR, within1s: true });
  });

  it('on an open session the same kind of frame is an error, then 4400: the socket is not left open, ignored and unwatched, its object spinning on a past retention alarm', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.sendRaw(frame('ü'.repeat(80), null));
    expect((await peer.next((f) => f.type === 'error', 3_000)).payload.code).toBe('invalid');
    expect((await peer.closedWith(5_000)).code).toBe(CloseCode.PROTOCOL_ERROR);
    await sleep(3_000); // past RETENTION_MS (2 s)
    const a = await h.admin('GET', `/clusters/${c.uid}/session/wakes`);
    await sleep(1_000);
    const b = await h.admin('GET', `/clusters/${c.uid}/session/wakes`);
    expect((b.json.by_kind.alarm ?? 0) - (a.json.by_kind.alarm ?? 0), JSON.stringify(b.json.by_kind)).toBeLessThan(5);
  });

  it('the error before the 4400 stays a valid catalog message (message ≤ 2,048 characters) when the frame\'s type is 3,000 characters, before the hello and in a session', async () => {
    const c = await h.newCluster();
    const first = await h.connect(c.token);
    first.sendRaw(frame('x'.repeat(3_000), null));
    const before = await first.next(() => true, 3_000);
    expect(readFrame(JSON.stringify(before)).kind).toBe('message');
    expect((await first.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
    const { peer } = await h.openFresh(c);
    peer.sendRaw(frame('y'.repeat(3_000), null));
    const during = await peer.next((f) => f.type === 'error', 3_000);
    expect(readFrame(JSON.stringify(during)).kind).toBe('message');
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });
});

describe('hostile frames: what the hub answers a malformed frame with', () => {
  it('the error before a 4400 names no reply_to that is not a ULID (a gap frame whose id is not one)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.observed', id: 'not-a-ulid', seq: 5, ack: peer.hubCursor, reply_to: null, ts: new Date().toISOString(), payload: node('n1') }));
    const closed = await peer.closedWith();
    expect(closed.code).toBe(4400);
    const err = peer.frames.find((f) => f.type === 'error');
    expect(err?.payload.message).toMatch(/^gap: expected seq 1, got 5/);
    expect(err?.reply_to).toBeNull();
    // The harness flags any hub frame a conforming operator would refuse; there must be none.
    expect(peer.invalid).toEqual([]);
  });

  it('the error before a 4400 answers a frame whose id is a ULID by that id', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const id = newId();
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.observed', id, seq: 5, ack: peer.hubCursor, reply_to: null, ts: new Date().toISOString(), payload: node('n1') }));
    expect((await peer.closedWith()).code).toBe(4400);
    const err = peer.frames.find((f) => f.type === 'error');
    expect(err?.reply_to).toBe(id);
    expect(ULID_RE.test(String(err?.reply_to))).toBe(true);
  });

  it('a hello with resume_from but no session_id is granted a fresh session, resume_from unconsulted', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name, session_id: null, resume_from: 7 });
    expect(w.payload).toMatchObject({ full_resync: true, ack_seq: 0 });
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.close();
  });
});

describe('hostile admin bodies', () => {
  it('a body nested deeper than any admin shape is a 400 naming where, not a 5xx', async () => {
    const c = await h.newCluster();
    const depth = 100_000;
    const body = `{"workload_id":"w1","min_replicas":1,"max_replicas":2,"serving":{"engine":"vllm","model":"m","image":"img:1","args":[],"env":{},"gpus_per_replica":1,"gpu_model":null,"port":8000},"zz":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const res = await fetch(`${h.hub.url}/admin/clusters/${c.name}/deployments/d1`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json' },
      body,
    });
    const json = (await res.json()) as { error: { code: string; message: string } };
    expect(res.status).toBe(400);
    expect(json.error.code).toBe('invalid');
    expect(json.error.message).toMatch(/^zz(\.0)+: nested more than 32 levels deep$/);
  });
});
