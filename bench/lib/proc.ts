/**
 * Linux /proc sampling of another process: resident memory (VmRSS, VmHWM) and CPU time
 * (utime + stime), and finding the workerd processes a Node process started.
 */
import { readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // getconf CLK_TCK on Linux/x86-64

export interface MemSample {
  rssKiB: number;
  hwmKiB: number;
  /** Of the RSS: anonymous memory (heaps) and file-backed pages (mapped files, the binary). */
  anonKiB: number;
  fileKiB: number;
}

export function readMem(pid: number): MemSample {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Number(m[1]) : Number.NaN;
  };
  return { rssKiB: field('VmRSS'), hwmKiB: field('VmHWM'), anonKiB: field('RssAnon'), fileKiB: field('RssFile') };
}

/** Reset VmHWM to the current RSS (Linux: `echo 5 > /proc/PID/clear_refs`), so a scenario reads its own peak. */
export function resetPeak(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** CPU seconds (user + system) the process has used so far. */
export function readCpuSeconds(pid: number, withReapedChildren = false): number {
  const t = readCpuTimes(pid, withReapedChildren);
  return t.user + t.system;
}

/** CPU seconds the process has used so far, in its own code (user) and in the kernel for it (system). */
export function readCpuTimes(pid: number, withReapedChildren = false): { user: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name may contain spaces; fields after it are space-separated.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state); utime is field 14, stime 15, cutime 16, cstime 17.
  const utime = Number(rest[11]) + (withReapedChildren ? Number(rest[13]) : 0);
  const stime = Number(rest[12]) + (withReapedChildren ? Number(rest[14]) : 0);
  return { user: utime / TICKS_PER_SECOND, system: stime / TICKS_PER_SECOND };
}

export function parentOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[1]);
  } catch {
    return null;
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** Live pids whose parent is `pid`. */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const p = Number(name);
    if (parentOf(p) === pid) out.push(p);
  }
  return out;
}

/** workerd processes started by this Node process (wrangler's proxy worker and the user worker). */
export function workerdChildren(pid = process.pid): number[] {
  return childrenOf(pid).filter((p) => /\bworkerd\b.*\bserve\b/.test(commandOf(p)));
}

/** Whether the process has a file open under `dir` (the user worker opens its Durable Object SQLite there). */
export function hasOpenFileUnder(pid: number, dir: string): boolean {
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith(dir)) return true;
      } catch {
        // fd closed meanwhile
      }
    }
  } catch {
    return false;
  }
  return false;
}

/** Periodic sampler of one process: peak RSS seen and CPU used between start and stop. */
export class ProcSampler {
  private timer: ReturnType<typeof setInterval> | null = null;
  private cpu0 = 0;
  private system0 = 0;
  private t0 = 0;
  peakRssKiB = 0;
  samples: { t: number; rssKiB: number }[] = [];

  constructor(
    readonly pid: number,
    private readonly everyMs = 100,
  ) {}

  start(): void {
    const t = readCpuTimes(this.pid);
    this.cpu0 = t.user + t.system;
    this.system0 = t.system;
    this.t0 = performance.now();
    this.peakRssKiB = 0;
    this.samples = [];
    this.sample();
    this.timer = setInterval(() => this.sample(), this.everyMs);
  }

  private sample(): void {
    try {
      const m = readMem(this.pid);
      this.peakRssKiB = Math.max(this.peakRssKiB, m.rssKiB);
      this.samples.push({ t: performance.now() - this.t0, rssKiB: m.rssKiB });
    } catch {
      // process gone
    }
  }

  /** CPU seconds used (and of them, in the kernel) and wall seconds elapsed since start. */
  stop(): { cpuSeconds: number; systemSeconds: number; wallSeconds: number; peakRssKiB: number; endRssKiB: number } {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.sample();
    const t = readCpuTimes(this.pid);
    const cpuSeconds = t.user + t.system - this.cpu0;
    const systemSeconds = t.system - this.system0;
    const wallSeconds = (performance.now() - this.t0) / 1000;
    const last = this.samples[this.samples.length - 1];
    return { cpuSeconds, systemSeconds, wallSeconds, peakRssKiB: this.peakRssKiB, endRssKiB: last?.rssKiB ?? Number.NaN };
  }
}

/** Machine-wide busy CPU seconds since boot (all cores), from /proc/stat. */
export function machineBusySeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] as string;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal ...
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return (total - idle) / TICKS_PER_SECOND;
}

/** CPU seconds of this process, its descendants, and every postgres process (the database we drive). */
export function ownCpuSeconds(root = process.pid): number {
  const parents = new Map<number, number>();
  const names = new Map<number, string>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      names.set(pid, stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(pid, Number(rest[1]));
    } catch {
      // gone
    }
  }
  let sum = 0;
  for (const pid of parents.keys()) {
    let p: number | undefined = pid;
    let mine = names.get(pid) === 'postgres';
    for (let hops = 0; !mine && p !== undefined && p > 1 && hops < 64; hops++) {
      if (p === root) mine = true;
      p = parents.get(p);
    }
    if (!mine) continue;
    try {
      // The root also carries the CPU of children that already exited and were reaped.
      sum += readCpuSeconds(pid, pid === root);
    } catch {
      // gone
    }
  }
  return sum;
}

/**
 * Average number of cores other work used while `fn`'s window was open: machine busy time minus
 * our own tree and Postgres. Processes that started and ended inside the window are included
 * (they are in the machine total).
 */
export class ForeignLoad {
  private busy0 = 0;
  private own0 = 0;
  private t0 = 0;
  start(): void {
    this.busy0 = machineBusySeconds();
    this.own0 = ownCpuSeconds();
    this.t0 = performance.now();
  }
  /** Cores used by others on average over the window. */
  stop(): number {
    const wall = (performance.now() - this.t0) / 1000;
    const foreign = machineBusySeconds() - this.busy0 - (ownCpuSeconds() - this.own0);
    return wall > 0 ? Math.max(0, foreign / wall) : 0;
  }
}

/** CPU seconds of every process named postgres (server and backends; includes other users of the server). */
export function postgresCpuSeconds(): number {
  let sum = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== 'postgres') continue;
      sum += readCpuSeconds(Number(name), true); // the postmaster carries its exited backends
    } catch {
      // gone
    }
  }
  return sum;
}
