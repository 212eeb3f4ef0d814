/**
 * The benchmark's direct socket (bench/lib/direct-socket.ts): with it installed before wrangler
 * loads, a Worker started through wrangler's dev environment also listens on a socket of its own,
 * and a request there reaches the Worker without Miniflare's entry worker, which gives every
 * request it routes a `cf` object. Guards the bench against a wrangler upgrade that changes how
 * it builds Miniflare: the bench would then fail to start rather than measure through the entry.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { directOrigin, installDirectSocket, wantDirectSocket } from '../../bench/lib/direct-socket';
import { NO_ENV_FILES } from '../../scripts/lib/no-env-files';

const NAME = 'bench-direct-socket-probe';
const WORKER = `export default {
  fetch(request) {
    return Response.json({ cf: request.cf !== undefined, path: new URL(request.url).pathname });
  },
};`;

describe('bench direct socket', () => {
  let dir = '';
  let dispose: (() => Promise<void>) | undefined;
  let entry = '';

  beforeAll(async () => {
    installDirectSocket();
    wantDirectSocket(NAME);
    dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-direct-socket-'));
    await writeFile(path.join(dir, 'index.js'), WORKER);
    await writeFile(path.join(dir, 'wrangler.toml'), `name = "${NAME}"\nmain = "index.js"\ncompatibility_date = "2026-04-01"\n`);
    const { unstable_startWorker } = await import('wrangler');
    const worker = await unstable_startWorker({
      config: path.join(dir, 'wrangler.toml'),
      sendMetrics: false,
      envFiles: NO_ENV_FILES,
      dev: { server: { hostname: '127.0.0.1', port: 0 }, inspector: false, watch: false, logLevel: 'warn', persist: path.join(dir, 'state') },
    });
    await worker.ready;
    entry = (await worker.url).origin;
    dispose = () => worker.dispose();
  });

  afterAll(async () => {
    await dispose?.();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('serves the Worker on its own socket, without the entry worker (no request.cf there)', async () => {
    const origin = await directOrigin(NAME);
    expect(origin).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const direct = await (await fetch(`${origin}/probe`)).json();
    expect(direct).toEqual({ cf: false, path: '/probe' });
    // The usual way in (wrangler's proxy, then Miniflare's entry worker) still works, and does
    // carry what the entry worker adds: so the two sockets really take different paths.
    const routed = await (await fetch(`${entry}/probe`)).json();
    expect(routed).toEqual({ cf: true, path: '/probe' });
  });

  it('knows no direct socket for a Worker it was not asked for', async () => {
    expect(await directOrigin('some-other-worker')).toBeNull();
  });
});
