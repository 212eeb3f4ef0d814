/**
 * A session whose retention expires while its database link is stalled (a half-dead path: what
 * the hub sends goes nowhere and nothing comes back, the WebSocket's closing handshake included)
 * must still finish forgetting it. Pg.close() waited for the driver's end() with no bound, and
 * end() waits for that handshake: the retention's alarm never returned, and the object stayed
 * awake (in memory, its alarm invocation open) for as long as the link stayed stalled (found by
 * review). Other Pg.close() callers (the idle close, the gateway's) do not wait on it.
 *
 * The hub reaches the usual WS→TCP proxy through a stall relay (support/stall-relay.ts) between
 * workerd and the proxy, so a stall holds the WebSocket's own frames.
 */
import { afterAll, describe, inject, it } from 'vitest';
import { startPgWsProxy, type PgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { captureHubLines } from './support/hub-lines';
import { findProxyTarget } from './support/proxy-target';
import { startStallRelay, type StallRelay } from './support/stall-relay';
import { eventually, FAST_TIMERS, node, useHub } from './support/hub';

let relay: StallRelay | null = null;
let wsProxy: PgWsProxy | null = null;

// Info lines too: the retention's two lines are info.
process.env.E2E_HUB_LOG = 'log';
const lines = captureHubLines();
// The session's own connection is still open when its retention expires (it would otherwise have
// closed idle first, and there would be nothing to close).
const h = useHub({ ...FAST_TIMERS, RETENTION_MS: '1500', PG_IDLE_CLOSE_MS: '60000' }, async () => {
  wsProxy = await startPgWsProxy({ target: await findProxyTarget(inject('databaseUrl'), inject('pgWsProxy')) });
  const proxyPort = wsProxy.port;
  relay = await startStallRelay({ host: '127.0.0.1', port: proxyPort });
  return { PG_WS_PROXY: `127.0.0.1:${relay.port}` };
});
afterAll(async () => {
  relay?.close();
  await wsProxy?.close();
});

describe('retention expiring on a stalled database link', () => {
  it('still completes: the storage is deleted and the alarm returns, though the connection never answers its close', async () => {
    const c = await h.newCluster('stall-ret');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1')); // opens the session's own connection
    await peer.ackedThrough(1);
    peer.close();
    await peer.closed;
    relay!.stallOpen();
    const mine = (msg: string) => lines.some((l) => l.msg === msg && l.session === sessionId) || undefined;
    await eventually(async () => mine('session retention expired; deleting its storage'), 10_000);
    // Bounded by the close's own waits (a second for the prepared statements, a second for the end), not by the link.
    await eventually(async () => mine('session storage deleted'), 10_000);
  }, 30_000);
});
