/**
 * The operator SDK's disk work for a flood of `operation.start` frames, against the same SDK as
 * committed at a baseline ref (its src/ extracted with `git archive` and loaded beside the working
 * tree's, as bench/micro/hot-paths.ts does), in one run:
 *
 *   npx tsx bench/micro/operation-starts.ts [--baseline 1568def] [--n 1000,5000] [--runs 3]
 *     [--handlers done,held] [--limit-s 600]
 *
 * N starts are written back to back by a scripted hub (the real `ws` server of the SDK's unit
 * tests; frames built from fixtures/, acknowledged as read, as the hub does) to a client on real
 * file stores in a temporary directory (cursor.json written, fsynced, renamed at every save).
 * Reported: the time from the first start to the client's cursor passing the last, how many
 * cursor.json saves that took and the bytes they wrote. `done`: handlers conclude at once;
 * `held`: every handler stays running. A run still going after --limit-s is reported as such,
 * with what it had done by then.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { OperatorClient as Client } from '../../src/operator/client';
import type { DurableRecord } from '../../src/operator/cursor-store';
import type { openFileStores as OpenFileStores } from '../../src/operator/file-stores';
import type { OperatorHandlers } from '../../src/operator/handlers';
import type { silentLogger as SilentLogger } from '../../src/operator/logger';
import type { systemTimers as SystemTimers } from '../../src/operator/timers';
import { SNAPSHOT } from '../../test/unit/operator/support/harness';
import { operationStart } from '../../test/unit/operator/support/operations';
import { ScriptedHub } from '../../test/unit/operator/support/scripted-hub';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const { values: args } = parseArgs({
  options: {
    baseline: { type: 'string', default: '1568def' },
    n: { type: 'string', default: '1000,5000' },
    runs: { type: 'string', default: '3' },
    handlers: { type: 'string', default: 'done,held' },
    'limit-s': { type: 'string', default: '600' },
  },
});
const limitMs = Number(args['limit-s']) * 1000;

interface Tree {
  OperatorClient: typeof Client;
  openFileStores: typeof OpenFileStores;
  systemTimers: typeof SystemTimers;
  silentLogger: typeof SilentLogger;
}

async function load(srcDir: string): Promise<Tree> {
  const mod = async (p: string) => (await import(pathToFileURL(path.join(srcDir, `operator/${p}.ts`)).href)) as Record<string, unknown>;
  return {
    OperatorClient: (await mod('client')).OperatorClient as Tree['OperatorClient'],
    openFileStores: (await mod('file-stores')).openFileStores as Tree['openFileStores'],
    systemTimers: (await mod('timers')).systemTimers as Tree['systemTimers'],
    silentLogger: (await mod('logger')).silentLogger as Tree['silentLogger'],
  };
}

function extract(ref: string): { dir: string; sha: string } {
  const sha = execFileSync('git', ['-C', ROOT, 'rev-parse', '--short=12', ref], { encoding: 'utf8' }).trim();
  const dir = mkdtempSync(path.join(tmpdir(), 'wingsmith-micro-baseline-'));
  execFileSync('sh', ['-c', 'git -C "$1" archive "$2" src | tar -x -C "$3"', 'sh', ROOT, sha, dir]);
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  return { dir, sha };
}

interface Row {
  ms: number;
  saves: number;
  bytes: number;
  /** The run hit --limit-s: `ms` is the limit, the counts what it had done. */
  cut: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function once(tree: Tree, n: number, mode: 'done' | 'held'): Promise<Row> {
  const dir = mkdtempSync(path.join(tmpdir(), 'wingsmith-opstarts-'));
  const hub = await ScriptedHub.start();
  const held: (() => void)[] = [];
  const disk = { saves: 0, bytes: 0 };
  try {
    const stores = await tree.openFileStores(dir);
    const store = stores.cursorStore;
    const save = store.save.bind(store);
    store.save = (record: DurableRecord) => {
      disk.saves++;
      disk.bytes += Buffer.byteLength(JSON.stringify(record)) + 1;
      return save(record);
    };
    const handlers: OperatorHandlers = {
      desired: () => ({ ok: true }),
      pruneDesired: () => ({ ok: true }),
      operation: () =>
        mode === 'done' ? { outcome: 'succeeded', message: 'done' } : new Promise((resolve) => held.push(() => resolve({ outcome: 'succeeded', message: 'done' }))),
    };
    const client = new tree.OperatorClient({
      url: hub.url, token: 'wsmet_bench', clusterId: 'c1', operatorVersion: '0.1.0', snapshot: () => SNAPSHOT,
      handlers, timers: tree.systemTimers, logger: tree.silentLogger, cursorStore: store, outboundLog: stores.outboundLog,
    });
    await client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', limits: { replay_buffer_frames: 100_000, replay_buffer_bytes: 1 << 30 } });
    // The hub acknowledges what it reads.
    conn.socket.on('message', (data) => {
      const f = JSON.parse(String(data)) as { seq: number | null };
      if (f.seq !== null) conn.send('ack', {}, { ack: f.seq });
    });
    await conn.nextOf('stream.end');
    const starts = Array.from({ length: n }, () => operationStart(Date.now()));
    disk.saves = 0;
    disk.bytes = 0;
    const began = performance.now();
    let last = 0;
    for (const p of starts) last = conn.sendSeq('operation.start', p).seq;
    let cut = false;
    while (client.session.cursor < last) {
      if (performance.now() - began > limitMs) {
        cut = true;
        break;
      }
      await sleep(2);
    }
    const row = { ms: performance.now() - began, saves: disk.saves, bytes: disk.bytes, cut };
    for (const h of held) h();
    await client.stop({ graceful: false });
    return row;
  } finally {
    await hub.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const show = (rows: Row[]) => {
  const ms = median(rows.map((r) => r.ms));
  const cut = rows.some((r) => r.cut) ? ' (cut at the limit)' : '';
  return `${(ms / 1000).toFixed(2)} s${cut}, ${median(rows.map((r) => r.saves))} saves, ${(median(rows.map((r) => r.bytes)) / 2 ** 20).toFixed(1)} MiB`;
};

async function main(): Promise<void> {
  const base = extract(args.baseline as string);
  try {
    const before = await load(path.join(base.dir, 'src'));
    const after = await load(path.join(ROOT, 'src'));
    console.log(`Baseline: ${base.sha} (git archive); after: the working tree. Node ${process.version}; median of ${args.runs} runs, trees alternating.\n`);
    console.log('| handlers | starts | before | after | time after / before |');
    console.log('|---|---:|---|---|---:|');
    for (const mode of (args.handlers as string).split(',') as ('done' | 'held')[]) {
      for (const n of (args.n as string).split(',').map(Number)) {
        const rows: { before: Row[]; after: Row[] } = { before: [], after: [] };
        for (let r = 0; r < Number(args.runs); r++) {
          rows.before.push(await once(before, n, mode));
          rows.after.push(await once(after, n, mode));
        }
        const ratio = median(rows.after.map((r) => r.ms)) / median(rows.before.map((r) => r.ms));
        console.log(`| ${mode} | ${n} | ${show(rows.before)} | ${show(rows.after)} | ${ratio.toFixed(3)}× |`);
      }
    }
  } finally {
    rmSync(base.dir, { recursive: true, force: true });
  }
}

await main();
process.exit(0);
