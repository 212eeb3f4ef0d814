/**
 * What local workerd charges to hand one WebSocket message to a Durable Object, before the hub
 * does anything with it: the floor under the hub's CPU per ingested frame.
 *
 *   npx tsx bench/micro/ws-delivery.ts [--runs 3] [--ms 3000] [--window 10000]
 *
 * One Node client sends the hub's device.observed frames (bench/lib/payloads.ts, built as the
 * ingest benchmark builds them) over one connection, keeping at most `window` unacknowledged;
 * the receiver counts them and every 500 sends `{"ack":n}` back. Receivers, side by side in one
 * run, round-robin:
 * - `hibernatable`: an object that takes the socket with `ctx.acceptWebSocket` (as the hub's
 *   session object does) and counts in `webSocketMessage`;
 * - `hibernatable+parse`: the same, plus `JSON.parse` of each message;
 * - `accepted`: an object that takes it with `ws.accept()` and a `message` listener (no
 *   hibernation);
 * - `node`: Node's `ws` server in this process's child, counting (the ingest benchmark's echo
 *   ceiling acks every frame; this one acks like the others).
 * Reported: frames/s and the receiver's CPU (workerd's, or the Node child's) per frame.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import WebSocket, { WebSocketServer } from 'ws';
import { buildFrame } from '../../src/protocol';
import { device } from '../lib/payloads';
import { readCpuSeconds, workerdChildren } from '../lib/proc';
import { median } from '../lib/stats';

const ACK_EVERY = 500;
const HERE = fileURLToPath(import.meta.url);

const WORKER = `
import { DurableObject } from 'cloudflare:workers';
const EVERY = ${ACK_EVERY};
export class Hib extends DurableObject {
  n = 0;
  parse = false;
  async fetch(req) {
    const pair = new WebSocketPair();
    const q = new URL(req.url).searchParams;
    this.parse = q.has('parse');
    // The hub's session object keeps a canonical ping → pong pair installed while its replay buffer is empty.
    if (q.has('auto')) this.ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair('{"v":1,"type":"ping","id":null,"seq":null,"ack":0,"reply_to":null,"ts":null,"payload":{}}', '{"v":1,"type":"pong","id":null,"seq":null,"ack":0,"reply_to":null,"ts":null,"payload":{}}'));
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }
  webSocketMessage(ws, msg) {
    if (this.parse) JSON.parse(msg);
    if (++this.n % EVERY === 0) ws.send('{"ack":' + this.n + '}');
  }
}
export class HibAsync extends Hib {
  async webSocketMessage(ws, msg) {
    super.webSocketMessage(ws, msg);
  }
}
export class Acc extends DurableObject {
  async fetch(req) {
    const pair = new WebSocketPair();
    const ws = pair[1];
    ws.accept();
    let n = 0;
    ws.addEventListener('message', () => {
      if (++n % EVERY === 0) ws.send('{"ack":' + n + '}');
    });
    return new Response(null, { status: 101, webSocket: pair[0] });
  }
}
export default {
  fetch(req, env) {
    const url = new URL(req.url);
    const ns = url.pathname === '/acc' ? env.ACC : url.pathname === '/hib-async' ? env.HIBA : env.HIB;
    return ns.get(ns.newUniqueId()).fetch(req);
  },
};
`;

interface Mode {
  name: string;
  url: string;
  pid: number;
}

/** Send as fast as the window allows for `ms`; frames acknowledged per second. */
async function drive(url: string, frames: string[], window: number, ms: number, pid: number): Promise<{ fps: number; cpuUsPerFrame: number }> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  let sent = 0;
  let acked = 0;
  let stopAt = Number.POSITIVE_INFINITY;
  let mark: { at: number; acked: number; cpu: number } | null = null;
  let done: (v: { fps: number; cpuUsPerFrame: number }) => void = () => undefined;
  const finished = new Promise<{ fps: number; cpuUsPerFrame: number }>((r) => (done = r));
  const pump = (): void => {
    while (sent - acked < window && performance.now() < stopAt) {
      ws.send(frames[sent % frames.length] as string);
      sent++;
    }
  };
  ws.on('message', (data) => {
    acked = (JSON.parse(String(data)) as { ack: number }).ack;
    const now = performance.now();
    if (!mark && now >= warmEnd) mark = { at: now, acked, cpu: readCpuSeconds(pid) };
    if (mark && now >= stopAt) {
      const frames = acked - mark.acked;
      done({ fps: (frames * 1000) / (now - mark.at), cpuUsPerFrame: ((readCpuSeconds(pid) - mark.cpu) * 1e6) / frames });
      return;
    }
    pump();
  });
  const warmEnd = performance.now() + 500;
  stopAt = warmEnd + ms;
  pump();
  const r = await finished;
  ws.close();
  return r;
}

async function main(): Promise<void> {
  const { values: args } = parseArgs({
    options: { runs: { type: 'string', default: '3' }, ms: { type: 'string', default: '3000' }, window: { type: 'string', default: '10000' } },
  });
  const runs = Number(args.runs);
  const ms = Number(args.ms);
  const window = Number(args.window);
  const frames = Array.from({ length: 10_000 }, (_, i) => buildFrame({ type: 'device.observed', payload: device(i), seq: i + 1 }));

  const require = createRequire(import.meta.url);
  const miniflarePath = require.resolve('miniflare', { paths: [require.resolve('wrangler')] });
  const { Miniflare } = (await import(miniflarePath)) as typeof import('miniflare');
  const before = new Set(workerdChildren());
  const mf = new Miniflare({
    workers: [
      {
        name: 'delivery',
        modules: true,
        script: WORKER,
        compatibilityDate: '2026-04-01',
        durableObjects: { HIB: { className: 'Hib', useSQLite: true }, ACC: { className: 'Acc', useSQLite: true }, HIBA: { className: 'HibAsync', useSQLite: true } },
        unsafeDirectSockets: [{ host: '127.0.0.1', port: 0 }],
      },
    ],
  });
  await mf.ready;
  const direct = await mf.unsafeGetDirectURL('delivery');
  const pid = workerdChildren().find((p) => !before.has(p));
  if (!pid) throw new Error('workerd process not found');
  const wsBase = direct.href.replace(/^http/, 'ws').replace(/\/$/, '');

  const child: ChildProcess = fork(HERE, ['--node-child'], { execArgv: ['--import', 'tsx'] });
  const port = await new Promise<number>((resolve) => child.once('message', (m) => resolve((m as { port: number }).port)));

  const modes: Mode[] = [
    { name: 'hibernatable', url: `${wsBase}/hib`, pid },
    { name: 'hibernatable, async handler', url: `${wsBase}/hib-async`, pid },
    { name: 'hibernatable, auto-response pair set', url: `${wsBase}/hib?auto`, pid },
    { name: 'hibernatable+parse', url: `${wsBase}/hib?parse`, pid },
    { name: 'accepted', url: `${wsBase}/acc`, pid },
    { name: 'node', url: `ws://127.0.0.1:${port}/`, pid: child.pid as number },
  ];
  const results = new Map<string, { fps: number[]; cpu: number[] }>(modes.map((m) => [m.name, { fps: [], cpu: [] }]));
  try {
    for (let r = 0; r < runs + 1; r++) {
      for (const m of modes) {
        const out = await drive(m.url, frames, window, r === 0 ? 500 : ms, m.pid);
        if (r === 0) continue; // warm-up round
        const acc = results.get(m.name) as { fps: number[]; cpu: number[] };
        acc.fps.push(out.fps);
        acc.cpu.push(out.cpuUsPerFrame);
      }
    }
  } finally {
    child.kill();
    await mf.dispose();
  }
  const frameBytes = Buffer.byteLength(frames[0] as string);
  console.log(`\nws delivery, one connection, ${frameBytes}-byte device.observed frames, window ${window}, ack every ${ACK_EVERY}; ${runs} runs of ${ms} ms (medians; min–max)\n`);
  console.log('| receiver | frames/s | receiver CPU per frame |');
  console.log('|---|---:|---:|');
  for (const [name, v] of results) {
    const f = (xs: number[], d: number) => `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
    console.log(`| ${name} | ${f(v.fps, 0)} | ${f(v.cpu, 2)} µs |`);
  }
}

if (process.argv[2] === '--node-child') {
  // The Node receiver, in a process of its own so its CPU can be read apart from the sender's.
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (ws) => {
    let n = 0;
    ws.on('message', () => {
      if (++n % ACK_EVERY === 0) ws.send(`{"ack":${n}}`);
    });
  });
  wss.on('listening', () => process.send?.({ port: (wss.address() as { port: number }).port }));
} else {
  await main();
}
