/** Baseline servers in child processes. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { forkTs, readyMessage } from './env';

const BASELINES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../baselines');

export interface ChildServer {
  port: number;
  pid: number;
  child: ChildProcess;
  stop(): Promise<void>;
}

export async function startChildServer(file: string, env: NodeJS.ProcessEnv = {}): Promise<ChildServer> {
  const child = forkTs(path.join(BASELINES, file), [], env);
  const ready = await readyMessage<{ port: number; pid: number }>(child, file, 30_000);
  return {
    port: ready.port,
    pid: ready.pid,
    child,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        const t = setTimeout(() => {
          child.kill('SIGKILL');
          resolve();
        }, 5_000);
        child.once('exit', () => {
          clearTimeout(t);
          resolve();
        });
        child.send({ type: 'stop' });
      }),
  };
}

export const startEchoServer = () => startChildServer('echo-server.ts');
export const startSocketIoServer = (databaseUrl: string, pgWsProxy: string) =>
  startChildServer('socketio-server.ts', { BENCH_DATABASE_URL: databaseUrl, BENCH_PG_WS_PROXY: pgWsProxy });
/** The runtime floor under ingest: a hibernatable Durable Object in local workerd (its `pid` is workerd's). */
export const startWorkerdFloor = () => startChildServer('workerd-floor.ts');
