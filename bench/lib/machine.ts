/** What the numbers were taken on. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface MachineInfo {
  nproc: number;
  cpuModel: string;
  memory: string;
  kernel: string;
  node: string;
  workerd: string;
  wrangler: string;
  socketIo: string;
  loadBefore: number[];
}

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '../..');

function pkgVersion(name: string): string {
  try {
    return (JSON.parse(readFileSync(path.join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

function tryExec(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

export function machineInfo(): MachineInfo {
  let model = cpus()[0]?.model ?? 'unknown';
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) model = (m[1] as string).trim();
  } catch {
    // not Linux
  }
  const workerdBin = path.join(ROOT, 'node_modules/.bin/workerd');
  return {
    nproc: Number(tryExec('nproc', [])) || cpus().length,
    cpuModel: model,
    memory: `${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
    kernel: tryExec('uname', ['-sr']),
    node: process.version,
    workerd: `${tryExec(workerdBin, ['--version'])} (npm workerd ${pkgVersion('workerd')})`,
    wrangler: pkgVersion('wrangler'),
    socketIo: pkgVersion('socket.io'),
    loadBefore: loadavg(),
  };
}

/** Other processes using the CPU right now (pid, %cpu, command), to say whether the machine was shared. */
export function otherBusyProcesses(): string[] {
  const out = tryExec('ps', ['-eo', 'pid,ppid,pcpu,etimes,args', '--sort=-pcpu']);
  const lines = out.split('\n').slice(1);
  const mine = new Set<number>([process.pid]);
  return lines
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => !mine.has(Number(f[0])) && !mine.has(Number(f[1])))
    .filter((f) => /vitest|node|workerd|postgres/.test(f.slice(4).join(' ')) && Number(f[2]) >= 5)
    .slice(0, 8)
    .map((f) => `${f.slice(4).join(' ').slice(0, 90)} (${f[2]}% CPU)`);
}
