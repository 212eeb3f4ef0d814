/**
 * A `.dev.vars` beside wrangler.toml reaches no hub that npm start or the tests launch: every
 * binding is the launcher's. With `envFiles: []` wrangler read `.dev.vars` (only an empty list
 * means "the defaults"), so a developer's file, gitignored and meant for something else, set the
 * hub's region (claiming the database for it), its timers or its proxy, with a log line the start
 * hid (found by a read-only review of npm start). The hub here runs from a copy of wrangler.toml in
 * a directory of its own, beside a `.dev.vars` that names a region.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { fileDatabaseUrl } from '../support/file-database';
import { launchHub, type LaunchedHub } from './support/launch';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
let dir: string | undefined;
let hub: LaunchedHub | undefined;
afterAll(async () => {
  await hub?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('a .dev.vars beside wrangler.toml', () => {
  it('sets nothing in a launched hub: /healthz names no region', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-devvars-'));
    const toml = (await readFile(path.join(ROOT, 'wrangler.toml'), 'utf8')).replace(/^main = "src\/hub\/index.ts"$/m, `main = ${JSON.stringify(path.join(ROOT, 'src/hub/index.ts'))}`);
    expect(toml).toContain(path.join(ROOT, 'src/hub/index.ts'));
    await writeFile(path.join(dir, 'wrangler.toml'), toml);
    await writeFile(path.join(dir, '.dev.vars'), 'HUB_REGION=eu\n');
    hub = await launchHub({
      configPath: path.join(dir, 'wrangler.toml'),
      vars: { DATABASE_URL: await fileDatabaseUrl(), PG_WS_PROXY: inject('pgWsProxy'), ADMIN_TOKEN: 'test-admin-token' },
    });
    const r = await fetch(`${hub.url}/healthz`);
    expect({ status: r.status, body: await r.json() }).toEqual({ status: 200, body: { ok: true, database: 'ok', schema: 'ok', region: null } });
  }, 60_000);
});
