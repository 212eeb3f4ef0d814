/**
 * Baseline: the runtime's floor under the hub's ingest. A Durable Object in local workerd takes
 * its socket with `ctx.acceptWebSocket`, as the hub's session object does, so each message is
 * handed to it as an event of its own; it parses every frame (as the echo server does), answers
 * hello with a welcome-shaped frame and ping with pong, and acknowledges the highest seq once per
 * 500 frames. Not an echo of every frame: a send from an object costs local workerd more
 * than the delivery does (measured: 17.8 µs of CPU per frame acking each one, against 6.7 µs
 * acking every 500th; bench/MICRO.md), and the hub acks once per committed batch.
 *
 * Started by Miniflare (wrangler's own copy) with a socket straight to the Worker, as the hub's
 * clients connect (bench/lib/direct-socket.ts). IPC: sends {type:'ready', port, pid} with pid the
 * workerd process; exits on {type:'stop'} or when the parent goes away.
 */
import { createRequire } from 'node:module';
import { workerdChildren } from '../lib/proc';

const SCRIPT = `
import { DurableObject } from 'cloudflare:workers';
let counter = 0;
function frame(type, ack, replyTo, payload) {
  return JSON.stringify({
    v: 1, type, id: '01ECHO' + (counter++).toString(36).toUpperCase().padStart(20, '0'),
    seq: null, ack, reply_to: replyTo, ts: new Date().toISOString(), payload,
  });
}
const ACK_EVERY = 500;
export class Echo extends DurableObject {
  cursor = 0;
  acked = 0;
  fetch() {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }
  webSocketMessage(ws, data) {
    const f = JSON.parse(data);
    if (f.type === 'hello') {
      ws.send(frame('welcome', 0, f.id, { session_id: 'echo', ack_seq: 0, full_resync: true, hub_version: 'echo', limits: {} }));
      return;
    }
    if (f.type === 'ping') {
      ws.send(frame('pong', this.cursor, f.id, {}));
      return;
    }
    if (typeof f.seq === 'number' && f.seq > this.cursor) this.cursor = f.seq;
    if (this.cursor - this.acked >= ACK_EVERY) {
      this.acked = this.cursor;
      ws.send(frame('ack', this.cursor, null, {}));
    }
  }
}
export default {
  fetch(request, env) {
    return env.ECHO.get(env.ECHO.newUniqueId()).fetch(request);
  },
};
`;

interface MiniflareLike {
  ready: Promise<URL>;
  unsafeGetDirectURL(worker?: string): Promise<URL>;
  dispose(): Promise<void>;
}
type MiniflareCtor = new (opts: Record<string, unknown>) => MiniflareLike;

const require = createRequire(import.meta.url);
const miniflarePath = require.resolve('miniflare', { paths: [require.resolve('wrangler')] });
const { Miniflare } = (await import(miniflarePath)) as { Miniflare: MiniflareCtor };

const before = new Set(workerdChildren());
const mf = new Miniflare({
  workers: [
    {
      name: 'workerd-floor',
      modules: true,
      script: SCRIPT,
      // The hub's (wrangler.toml).
      compatibilityDate: '2026-04-01',
      compatibilityFlags: ['nodejs_compat'],
      durableObjects: { ECHO: { className: 'Echo', useSQLite: true } },
      unsafeDirectSockets: [{ host: '127.0.0.1', port: 0 }],
    },
  ],
});
await mf.ready;
const direct = await mf.unsafeGetDirectURL('workerd-floor');
const pid = workerdChildren().find((p) => !before.has(p));
if (pid === undefined) throw new Error('workerd-floor: the workerd process was not found');
process.send?.({ type: 'ready', port: Number(direct.port), pid });

const stop = (): void => {
  void mf.dispose().finally(() => process.exit(0));
};
process.on('message', (m: { type?: string }) => {
  if (m?.type === 'stop') stop();
});
process.on('disconnect', stop);
