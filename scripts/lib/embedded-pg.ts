/**
 * Embedded Postgres (PGlite, WASM) served over the Postgres wire protocol on a TCP port, for
 * machines without a Postgres server. Put the WebSocket proxy in front of it like any other.
 *
 * What PGlite accepts (checked with 0.5.14 + pglite-socket 0.2.17): any user, password and
 * database name in the startup message; the session is always user `postgres` in database
 * `postgres` (the server is PostgreSQL 18 in WASM, not 15). It has a single backend, so
 * connections share one session: concurrent single statements interleave fine, but an open
 * explicit transaction holds every other connection's statements until it ends, so two
 * overlapping explicit transactions deadlock.
 */
import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

export interface EmbeddedPostgresOptions {
  /** Persisted between runs; a fresh directory costs ~5 s of initdb, an existing one ~1 s. */
  dataDir: string;
  /** 0 (default) picks an ephemeral port. */
  port?: number;
}

export interface EmbeddedPostgres {
  host: string;
  port: number;
  databaseUrl: string;
  close(): Promise<void>;
}

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  await mkdir(options.dataDir, { recursive: true });
  const db = await PGlite.create({ dataDir: options.dataDir });
  const host = '127.0.0.1';
  // pglite-socket defaults to one connection and answers a second with a non-protocol
  // "Too many connections" line; the hub opens one per Durable Object plus the Worker's own.
  const server = new PGLiteSocketServer({ db, host, port: options.port ?? 0, maxConnections: 1_000 });
  try {
    await server.start();
  } catch (err) {
    await db.close();
    throw err;
  }
  const port = Number(server.getServerConn().split(':').pop());
  return {
    host,
    port,
    databaseUrl: `postgres://postgres@${host}:${port}/postgres`,
    close: async () => {
      await server.stop();
      await db.close();
    },
  };
}
