/**
 * Ingest latency and CPU against load, as curves: `npx tsx bench/ingest-curve.ts [--rates
 * 100,500,…] [--seconds 3] [--reps 3] [--var KEY=VALUE] [--out bench/INGEST-CURVE.md]` (about six
 * minutes with the defaults); `--render FILE.raw.json` redoes the text and the pictures from a
 * run's measurements.
 *
 * The full benchmark (bench/RESULTS.md) measures ingest at two points: as fast as a window of
 * 10,000 unacknowledged frames allows, and paced at 5,000 frames/s. Between them is what an
 * operator's author sizing a cluster wants to know: how long an ack takes at the rate the
 * cluster sends, and where it stops keeping up. So the same sender (bench/lib/load.ts: one
 * session, device.observed frames over 10,000 existing GPUs, the same window) is paced at each
 * rate in turn, against the hub (acks after commit) and against the bare ws echo server (an ack
 * per frame after JSON.parse, storing nothing) at the same rate, one after the other, so both
 * see the same machine. At a rate past what a server takes, it achieves less than offered and
 * its latency is the window's wait; the final point of each is unpaced. `--reps` repeats the
 * sweep (rates in a new order each time) and reports each point's median.
 *
 * Writes the table (markdown), two pictures beside it (same name, `.svg`: ack latency p50 and p99
 * against the rate achieved; `-cpu.svg`: each server's CPU per frame against it, both on log
 * axes) and the measurements (`.raw.json`). A hand-written reading of a run goes below the marker
 * line and is kept by `--render`.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startEchoServer } from './lib/children';
import { hubVar } from './lib/args';
import { curveSvg, type Series } from './lib/curve-chart';
import { BenchEnv, type BenchCluster } from './lib/env';
import { fmtMs, fmtNum } from './lib/format';
import { runLoad } from './lib/load';
import { machineInfo, type MachineInfo } from './lib/machine';
import { readCpuSeconds } from './lib/proc';
import type { RawOperator } from './lib/operator';
import { median, summarize } from './lib/stats';
import { openEcho, openHubSession } from './scenarios/ingest';

const { values } = parseArgs({
  options: {
    rates: { type: 'string' },
    seconds: { type: 'string' },
    reps: { type: 'string' },
    out: { type: 'string' },
    render: { type: 'string' },
    var: { type: 'string', multiple: true },
  },
});
const HERE = path.dirname(new URL(import.meta.url).pathname);
const RATES = (values.rates ?? '100,500,2500,5000,10000,20000,30000,40000,45000,50000,60000').split(',').map(Number);
const MEASURE_MS = Number(values.seconds ?? 3) * 1000;
const REPS = Number(values.reps ?? 3);
const OUT = path.resolve(values.out ?? (values.render ? values.render.replace(/\.raw\.json$/, '.md') : path.join(HERE, 'INGEST-CURVE.md')));
const WINDOW = 10_000;
const SUBJECTS = 10_000;
/** Issue 13's one-session target, marked on the picture. */
const TARGET_FPS = 60_000;

if (RATES.some((r) => !Number.isFinite(r) || r <= 0) || !(MEASURE_MS > 0) || !(REPS >= 1)) {
  console.error('usage: npx tsx bench/ingest-curve.ts [--rates 100,500,…] [--seconds 3] [--reps 3] [--var KEY=VALUE] [--out FILE.md] | --render FILE.raw.json [--out FILE.md]');
  process.exit(2);
}

interface Point {
  /** Offered frames/s; 0: unpaced. */
  offered: number;
  achieved: number;
  p50: number;
  p99: number;
  /** CPU of the server's process (the hub's workerd, the echo's Node) per frame achieved, µs. */
  cpuUsPerFrame?: number;
}
type Server = 'hub' | 'echo';

/** What a run measured: everything the text and the picture are made from. */
interface Raw {
  started: string;
  command: string;
  source: string;
  machine: MachineInfo;
  rates: number[];
  measureMs: number;
  /** Hub settings given with --var. */
  vars?: Record<string, string>;
  /** Per server, one list of points per sweep. */
  runs: Record<Server, Point[][]>;
}
/** Below this line of the markdown, a person's reading of the run: kept when it is re-rendered. */
const MARKER = '<!-- measured above; a reading of the run below, kept by --render -->';

const log = (m: string) => console.log(`[curve ${new Date().toISOString().slice(11, 19)}] ${m}`);

async function measure(op: RawOperator, offered: number, pid: number): Promise<Point> {
  const c0 = readCpuSeconds(pid);
  const t0 = performance.now();
  const r = await runLoad(op, { window: WINDOW, warmupMs: 1_000, measureMs: MEASURE_MS, subjects: SUBJECTS, ...(offered ? { rate: offered } : {}) });
  // Over the whole run (its warm-up too), per frame at the rate achieved.
  const cpuUsPerFrame = ((readCpuSeconds(pid) - c0) / (((performance.now() - t0) / 1000) * r.perSecond)) * 1e6;
  const s = summarize(r.latencies);
  return { offered, achieved: r.perSecond, p50: s.p50, p99: s.p99, cpuUsPerFrame };
}

/** `--var KEY=VALUE`: a hub setting for the run (INGEST_LINGER_MS=5, say). */
const HUB_VARS = Object.fromEntries((values.var ?? []).map(hubVar));

const raw: Raw = values.render ? (JSON.parse(readFileSync(values.render, 'utf8')) as Raw) : await measureAll();

async function measureAll(): Promise<Raw> {
  const machine = machineInfo();
  const started = new Date();
  const command = `npx tsx bench/ingest-curve.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(' ')}` : ''}`;
  const env = await BenchEnv.start(HUB_VARS);
  const echo = await startEchoServer();
  const pids: Record<Server, number> = { hub: env.workerdPid, echo: echo.pid };
  const runs: Record<Server, Point[][]> = { hub: [], echo: [] };
  try {
    log(`hub source: ${env.source.label}`);
    const [cluster] = await env.createClusters(1, 'curve');
    const ops: Record<Server, RawOperator> = {
      hub: await openHubSession(env.wsUrl, cluster as BenchCluster),
      echo: await openEcho(`ws://127.0.0.1:${echo.port}`),
    };
    // As the ingest scenario: every GPU's row exists before anything is measured.
    await runLoad(ops.hub, { window: WINDOW, warmupMs: 0, measureMs: 0, subjects: SUBJECTS, total: SUBJECTS });
    await runLoad(ops.hub, { window: WINDOW, warmupMs: 0, measureMs: 1_500, subjects: SUBJECTS });
    for (let rep = 0; rep < REPS; rep++) {
      // Odd sweeps run the rates downwards: a drift of the machine through a sweep then tilts the
      // two halves of the curve opposite ways instead of the same way twice.
      const order = [...(rep % 2 === 0 ? RATES : [...RATES].reverse()), 0];
      const byServer: Record<Server, Point[]> = { hub: [], echo: [] };
      for (const [k, offered] of order.entries()) {
        // Which server goes first alternates, so neither always runs on the machine the other left.
        const pair: Server[] = (k + rep) % 2 === 0 ? ['hub', 'echo'] : ['echo', 'hub'];
        for (const server of pair) {
          const p = await measure(ops[server], offered, pids[server]);
          byServer[server].push(p);
          log(`${server} ${offered ? `paced at ${fmtNum(offered)}` : 'unpaced'}: ${fmtNum(p.achieved)} frames/s, ack p50 ${fmtMs(p.p50)}, p99 ${fmtMs(p.p99)}, ${fmtNum(p.cpuUsPerFrame ?? Number.NaN)} µs CPU/frame`);
        }
      }
      for (const server of ['hub', 'echo'] as const) runs[server].push(byServer[server]);
    }
    ops.hub.close();
    ops.echo.close();
  } finally {
    await echo.stop();
    await env.stop();
  }
  return { started: started.toISOString(), command, source: env.source.label, machine, rates: RATES, measureMs: MEASURE_MS, vars: HUB_VARS, runs };
}

/** Each offered rate's median over the sweeps, in the order of `RATES` then unpaced. */
function medians(server: Server): Point[] {
  return [...raw.rates, 0].map((offered) => {
    const ps = raw.runs[server].map((sweep) => sweep.find((p) => p.offered === offered) as Point);
    const cpu = ps.map((p) => p.cpuUsPerFrame).filter((c): c is number => c !== undefined);
    return { offered, achieved: median(ps.map((p) => p.achieved)), p50: median(ps.map((p) => p.p50)), p99: median(ps.map((p) => p.p99)), ...(cpu.length ? { cpuUsPerFrame: median(cpu) } : {}) };
  });
}
const hub = medians('hub');
const echoPoints = medians('echo');

const svgName = `${path.basename(OUT, '.md')}.svg`;
mkdirSync(path.dirname(OUT), { recursive: true });
/** One line of a picture: the paced points joined, the unpaced one apart. */
const line = (label: string, color: string, dash: string, ps: Point[], y: (p: Point) => number | undefined): Series => {
  const at = (sel: Point[]): [number, number][] => sel.flatMap((p) => (y(p) === undefined ? [] : [[p.achieved, y(p) as number] as [number, number]]));
  return { label, color, dash, points: at(ps.filter((p) => p.offered > 0)), open: at(ps.filter((p) => p.offered === 0)) };
};
writeFileSync(path.join(path.dirname(OUT), svgName), curveSvg({ title: 'Ingest, one session: ack latency against frames/s achieved', yUnit: 'ms', targetFps: TARGET_FPS }, [
  line('hub, ack p50', '#c0392b', '', hub, (p) => p.p50),
  line('hub, ack p99', '#c0392b', '6 4', hub, (p) => p.p99),
  line('ws echo, ack p50', '#2471a3', '', echoPoints, (p) => p.p50),
  line('ws echo, ack p99', '#2471a3', '6 4', echoPoints, (p) => p.p99),
]));
// CPU per frame, where the run measured it (runs before the column have none).
const cpuSvgName = `${path.basename(OUT, '.md')}-cpu.svg`;
const hasCpu = hub.some((p) => p.cpuUsPerFrame !== undefined);
if (hasCpu) {
  writeFileSync(path.join(path.dirname(OUT), cpuSvgName), curveSvg({ title: 'Ingest, one session: server CPU per frame against frames/s achieved', yUnit: 'µs', xLog: true }, [
    line('hub (its workerd)', '#c0392b', '', hub, (p) => p.cpuUsPerFrame),
    line('ws echo (its Node)', '#2471a3', '', echoPoints, (p) => p.cpuUsPerFrame),
  ]));
}

const row = (p: Point) => `${fmtNum(p.achieved)} | ${fmtMs(p.p50)} | ${fmtMs(p.p99)} | ${p.cpuUsPerFrame === undefined ? '—' : fmtNum(p.cpuUsPerFrame)}`;
const lines = [
  '# Ingest: ack latency against load (one session)',
  '',
  `Written by \`bench/ingest-curve.ts\` on ${raw.started}; not part of \`npm run bench\`.`,
  '',
  '```',
  raw.command,
  '```',
  '',
  `- Hub: ${raw.source}; Postgres on 127.0.0.1 through the Neon driver and the WebSocket→TCP proxy, as in bench/RESULTS.md.`,
  `- Machine: ${raw.machine.nproc} cores, ${raw.machine.cpuModel}, ${raw.machine.memory}; Node ${raw.machine.node}; workerd ${raw.machine.workerd}; load average before ${raw.machine.loadBefore.map((x) => x.toFixed(2)).join(' / ')}.`,
  `- Sender: one session, device.observed frames over ${fmtNum(SUBJECTS)} GPUs whose rows exist, at most ${fmtNum(WINDOW)} unacknowledged (bench/lib/load.ts, as the ingest scenario); each point 1 s unmeasured then ${raw.measureMs / 1000} s measured; latency = frame sent → the first ack covering it. Hub and echo in turn at each rate, ${raw.runs.hub.length} sweep(s) (every second one downwards); each figure the median of the sweeps.`,
  `- The hub acks after its batch commits in Postgres; the echo acks every frame after JSON.parse and stores nothing. CPU per frame: the server process's user and system time over the point's run (its warm-up included) over the frames it took, the hub's workerd or the echo's Node (runs before this column was added have none).`,
  ...(raw.vars && Object.keys(raw.vars).length ? [`- Hub settings: ${Object.entries(raw.vars).map(([k, v]) => `\`${k}=${v}\``).join(', ')}.`] : []),
  '',
  `![Ack latency p50 and p99 against the rate achieved, hub and ws echo](${svgName})`,
  '',
  ...(hasCpu ? [`![Server CPU per frame against the rate achieved, hub and ws echo](${cpuSvgName})`, ''] : []),
  '| offered frames/s | hub: achieved | hub: ack p50 | hub: ack p99 | hub: workerd CPU µs/frame | echo: achieved | echo: ack p50 | echo: ack p99 | echo: CPU µs/frame |',
  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...hub.map((h, i) => `| ${h.offered ? fmtNum(h.offered) : 'unpaced'} | ${row(h)} | ${row(echoPoints[i] as Point)} |`),
  '',
];
const reading = existsSync(OUT) ? readFileSync(OUT, 'utf8').split(MARKER)[1] : undefined;
writeFileSync(OUT, [...lines, MARKER, reading?.replace(/^\n+/, '') ?? ''].join('\n'));
if (!values.render) writeFileSync(OUT.replace(/\.md$/, '.raw.json'), `${JSON.stringify(raw, null, 1)}\n`);
log(`wrote ${OUT}, ${svgName}${hasCpu ? ` and ${cpuSvgName}` : ''}`);
