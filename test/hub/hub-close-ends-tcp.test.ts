/**
 * Every close the hub starts ends the TCP connection, also when the peer never answers the close
 * frame (gone silent, or a client that ignores close frames). Local workerd ends a closed socket's
 * TCP connection only once the peer answers; before the session object released such sockets
 * itself, each of these stayed open for good (still open 140 s after the close): a file
 * descriptor per dead operator, and nothing to tell the peer its link is gone. The client here is
 * written by hand (raw-ws.ts) and never answers a close.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, CloseCode } from '../../src/protocol';
import { cfgNumber, FAST_TIMERS, useHub, type TestCluster } from './support/hub';
import { RawSocket } from './support/raw-ws';

const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: '65536' });
/**
 * Far longer than the hub needs (the close's own deadline, then its grace of one handshake
 * timeout) and far shorter than never.
 */
const endWithinMs = () => cfgNumber(h, 'IDLE_TIMEOUT_MS', 30_000) + 4 * cfgNumber(h, 'HANDSHAKE_TIMEOUT_MS', 10_000);

const hello = (c: TestCluster) =>
  buildFrame({ type: 'hello', payload: { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false } });

async function openSession(c: TestCluster): Promise<RawSocket> {
  const raw = await RawSocket.connect(h.hub.url, c.token);
  raw.sendText(hello(c));
  await raw.until(() => raw.texts().some((f) => f.type === 'stream.end'), 10_000, 'the resync to end');
  return raw;
}

/** The hub's close frame came with `code`, then the hub ended the TCP connection although this side never answered. */
async function closedAndEnded(raw: RawSocket, code: number): Promise<void> {
  await raw.until(() => raw.isEnded, endWithinMs(), 'the hub to end the TCP connection');
  expect(raw.closeFrame?.code).toBe(code);
  expect(raw.frames.filter((f) => f.opcode === 0x8)).toHaveLength(1);
}

/** The cluster is shown disconnected, and its next hello is welcomed (the session resumed or a fresh one). */
async function recovers(c: TestCluster): Promise<void> {
  const view = await h.admin('GET', `/clusters/${c.name}`);
  expect(view.status).toBe(200);
  expect(view.json.session?.connected ?? false).toBe(false);
  const again = await openSession(c);
  expect(again.texts().find((f) => f.type === 'welcome' || f.type === 'error')?.type).toBe('welcome');
  again.destroy();
}

describe('a hub-initiated close ends the TCP connection when the peer never answers it', () => {
  it('4400: an undecodable envelope on an open session', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    raw.sendText('not json');
    await closedAndEnded(raw, CloseCode.PROTOCOL_ERROR);
    await recovers(c);
  });

  it('4400: invalid UTF-8 in a text frame (the runtime delivers it; the envelope does not decode)', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    raw.sendFrame(0x1, Buffer.from([0x7b, 0xff, 0xfe, 0x7d]));
    await closedAndEnded(raw, CloseCode.PROTOCOL_ERROR);
    await recovers(c);
  });

  it('4400: a second hello', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    raw.sendText(hello(c));
    await closedAndEnded(raw, CloseCode.PROTOCOL_ERROR);
    await recovers(c);
  });

  it('1009: a frame over max_frame_bytes', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    raw.sendText(JSON.stringify({ pad: 'x'.repeat(70_000) }));
    await closedAndEnded(raw, CloseCode.TOO_BIG);
    await recovers(c);
  });

  it('4408: silence past the idle limit (a peer gone quiet, as a dead one is)', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    await closedAndEnded(raw, CloseCode.TIMEOUT);
    await recovers(c);
  });

  it('4408: silence after a fragment whose continuation never comes', async () => {
    const c = await h.newCluster();
    const raw = await openSession(c);
    raw.sendFrame(0x1, '{"v":1', { fin: false });
    await closedAndEnded(raw, CloseCode.TIMEOUT);
    await recovers(c);
  });

  it('4408: no hello within the handshake timeout (an object that holds no session yet)', async () => {
    const c = await h.newCluster();
    const raw = await RawSocket.connect(h.hub.url, c.token);
    await closedAndEnded(raw, CloseCode.TIMEOUT);
    await recovers(c);
  });

  it('4400 at the handshake: a hello naming another cluster', async () => {
    const c = await h.newCluster();
    const other = await h.newCluster();
    const raw = await RawSocket.connect(h.hub.url, c.token);
    raw.sendText(hello(other));
    await closedAndEnded(raw, CloseCode.PROTOCOL_ERROR);
    await recovers(c);
  });

  it('4409: displaced by a fresh session of the same cluster (its own object)', async () => {
    const c = await h.newCluster();
    const older = await openSession(c);
    const newer = await openSession(c);
    await closedAndEnded(older, CloseCode.DISPLACED);
    expect(newer.isEnded).toBe(false);
    newer.destroy();
  });
});
