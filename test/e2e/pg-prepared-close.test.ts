/**
 * A connection's prepared statements go with it. Postgres drops them when a connection ends, but
 * the embedded Postgres `npm start` falls back to (PGlite) runs every connection in one backend,
 * where a closed connection's statements stayed for as long as the hub ran: every idle close of a
 * gateway or session connection left its named statements behind. The hub's own `Pg`, from Node,
 * against a real PGlite behind the same WebSocket proxy the hub uses.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { neonConfig } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import ws from 'ws';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../scripts/lib/embedded-pg';
import { startPgWsProxy, type PgWsProxy } from '../../scripts/lib/pg-ws-proxy';
import { Pg } from '../../src/hub/pg';

let dataDir: string;
let db: EmbeddedPostgres;
let proxy: PgWsProxy;
let config: { DATABASE_URL: string; PG_WS_PROXY: string };

beforeAll(async () => {
  // Node 20 has no global WebSocket; workerd, where the hub runs, does.
  neonConfig.webSocketConstructor = ws as unknown as typeof neonConfig.webSocketConstructor;
  dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-pglite-'));
  db = await startEmbeddedPostgres({ dataDir });
  proxy = await startPgWsProxy({ target: { host: db.host, port: db.port } });
  config = { DATABASE_URL: db.databaseUrl, PG_WS_PROXY: proxy.url };
});

afterAll(async () => {
  await proxy?.close();
  await db?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function preparedNames(observer: Pg): Promise<string[]> {
  const r = await observer.query<{ name: string }>('select name from pg_prepared_statements order by name');
  return r.rows.map((x) => x.name);
}

describe('prepared statements on a shared backend', () => {
  it('are dropped when their connection closes, and only theirs', async () => {
    const observer = new Pg(config, { idleCloseMs: 60_000 });
    const a = new Pg(config, { idleCloseMs: 60_000 });
    const b = new Pg(config, { idleCloseMs: 60_000 });
    try {
      for (let i = 0; i < 3; i++) {
        expect((await a.query<{ x: number }>('select $1::int + 1 as x', [i], 'plus_one_v1')).rows[0]?.x).toBe(i + 1);
        await a.query('select $1::text as t', ['a'], 'echo_v1');
        await b.query('select $1::text as t', ['b'], 'echo_v1');
      }
      // One backend: each connection's names are tagged, so all three are there side by side.
      expect(await preparedNames(observer)).toHaveLength(3);

      await a.close();
      const left = await preparedNames(observer);
      expect(left).toHaveLength(1);
      expect(left[0]).toMatch(/^echo_v1_/);
      // b's statement still runs (it was not dropped under it).
      expect((await b.query<{ t: string }>('select $1::text as t', ['still'], 'echo_v1')).rows[0]?.t).toBe('still');

      // Reopened, a uses fresh names, and an idle close drops them too.
      const quick = new Pg(config, { idleCloseMs: 200 });
      await quick.query('select 1 as one', [], 'one_v1');
      expect(await preparedNames(observer)).toHaveLength(2);
      await new Promise((r) => setTimeout(r, 1_000));
      expect(quick.isOpen).toBe(false);
      expect(await preparedNames(observer)).toHaveLength(1);
    } finally {
      await Promise.all([a.close(), b.close(), observer.close()]);
    }
  });

  it('a failed statement leaves nothing that would stop the others being dropped', async () => {
    const observer = new Pg(config, { idleCloseMs: 60_000 });
    const a = new Pg(config, { idleCloseMs: 60_000 });
    try {
      // The broken one first: its name would come first in the list dropped at close.
      await expect(a.query('select from no_such_table', [], 'broken_v1')).rejects.toThrow(/no_such_table/);
      await a.query('select 2 as two', [], 'two_v1');
      await a.close();
      expect(await preparedNames(observer)).toEqual([]);
    } finally {
      await Promise.all([a.close(), observer.close()]);
    }
  });
});
