/**
 * Optional experiment (`--pooler`): a PgBouncer in transaction-pooling mode between the
 * WebSocket proxy and Postgres, so a "new connection" from the hub no longer forks a Postgres
 * backend — what Neon's pooled endpoint (or Hyperdrive) gives in production. Needs the
 * `pgbouncer` binary (Debian package `pgbouncer`); started as the `postgres` user in a temp dir
 * and stopped (by pid) at the end.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface Pooler {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      srv.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

async function waitForPort(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port });
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`pgbouncer did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function startPooler(target = { host: '127.0.0.1', port: 5432, user: 'postgres' }): Promise<Pooler> {
  const dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-bench-pgbouncer-'));
  await chmod(dir, 0o777);
  const port = await freePort();
  const ini = path.join(dir, 'pgbouncer.ini');
  await writeFile(
    ini,
    [
      '[databases]',
      `* = host=${target.host} port=${target.port} user=${target.user}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = transaction',
      'max_client_conn = 10000',
      'default_pool_size = 20',
      'max_db_connections = 40',
      'server_reset_query =',
      'ignore_startup_parameters = extra_float_digits,statement_timeout,options,application_name',
      `logfile = ${path.join(dir, 'pgbouncer.log')}`,
      '',
    ].join('\n'),
  );
  await chmod(ini, 0o644);
  const args = process.getuid?.() === 0 ? ['-u', 'postgres', ini] : [ini];
  const child: ChildProcess = spawn('pgbouncer', args, { stdio: 'ignore' });
  const failed = new Promise<never>((_, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`pgbouncer exited with ${code}`)));
  });
  await Promise.race([waitForPort(port, 10_000), failed]);
  return {
    url: `postgres://${target.user}@127.0.0.1:${port}/postgres`,
    pid: child.pid ?? 0,
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        child.kill('SIGINT');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
        if (child.exitCode === null) child.kill('SIGKILL');
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
