/**
 * Baseline "ceiling": a bare Node `ws` server that parses every frame as JSON and answers each
 * with an ack (and hello with a welcome-shaped frame, ping with pong). No storage, no schema
 * validation, no batching. Runs in its own process (as workerd does) so it never shares an event
 * loop with the load generator.
 *
 * IPC: sends {type:'ready', port, pid}; exits on {type:'stop'} or when the parent goes away.
 */
import { WebSocketServer } from 'ws';

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
let counter = 0;

function frame(type: string, ack: number | null, replyTo: string | null, payload: unknown): string {
  return JSON.stringify({
    v: 1,
    type,
    id: `01ECHO${(counter++).toString(36).toUpperCase().padStart(20, '0')}`,
    seq: null,
    ack,
    reply_to: replyTo,
    ts: new Date().toISOString(),
    payload,
  });
}

wss.on('connection', (ws) => {
  let cursor = 0;
  ws.on('message', (data) => {
    const f = JSON.parse(String(data)) as { type: string; id: string; seq: number | null };
    if (f.type === 'hello') {
      ws.send(
        frame('welcome', 0, f.id, {
          session_id: 'echo',
          ack_seq: 0,
          full_resync: true,
          hub_version: 'echo',
          limits: {},
        }),
      );
      return;
    }
    if (f.type === 'ping') {
      ws.send(frame('pong', cursor, f.id, {}));
      return;
    }
    if (typeof f.seq === 'number' && f.seq > cursor) cursor = f.seq;
    ws.send(frame('ack', cursor, null, {}));
  });
  ws.on('error', () => undefined);
});

wss.once('listening', () => {
  const a = wss.address();
  if (typeof a === 'object' && a) process.send?.({ type: 'ready', port: a.port, pid: process.pid });
});
process.on('message', (m: { type?: string }) => {
  if (m?.type === 'stop') process.exit(0);
});
process.on('disconnect', () => process.exit(0));
