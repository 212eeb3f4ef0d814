import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import WebSocket from 'ws';
import { copyDatabase, startDevStack, type DevStack, type DevStackOptions } from '../../scripts/lib/dev-stack';
import { applyMigrations, migrate, readMigrations } from '../../scripts/lib/migrations';
import { pgTarget, withDatabase, withPg } from '../../scripts/lib/pg-node';
import { startPgWsProxy, type PgWsProxy } from '../../scripts/lib/pg-ws-proxy';

const databaseUrl = inject('databaseUrl');
const sharedProxy = inject('pgWsProxy');
const embedded = inject('embeddedPostgres');

// Frontend protocol messages, built by hand so the tests control exactly how they are chunked.
function startupMessage(params: Record<string, string>): Buffer {
  const body = Buffer.concat([
    ...Object.entries(params).map(([k, v]) => Buffer.from(`${k}\0${v}\0`)),
    Buffer.from([0]),
  ]);
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(196608, 4); // protocol 3.0
  return Buffer.concat([head, body]);
}
function typed(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}
const query = (sql: string) => typed('Q', Buffer.from(`${sql}\0`));
const TERMINATE = Buffer.from([0x58, 0, 0, 0, 4]);

function until(predicate: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = () => {
      if (predicate()) resolve();
      else if (Date.now() > deadline) reject(new Error('condition not met in time'));
      else setTimeout(tick, 10);
    };
    tick();
  });
}

async function openWs(proxy: PgWsProxy): Promise<WebSocket> {
  // The path and address mimic the Neon driver; the proxy must ignore the address.
  const ws = new WebSocket(`ws://${proxy.url}/v1?address=example.invalid:1`, { perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return ws;
}

/** One connection accepted by the fake database. */
interface FakeConn {
  socket: net.Socket;
  received(): Buffer;
  /** Resolves when the proxy half-closes (FIN) its side. */
  ended: Promise<void>;
  hasEnded(): boolean;
}

/** A TCP "database" that never hangs up on its own, recording what each connection receives. */
interface FakeTarget {
  port: number;
  nextConnection(): Promise<FakeConn>;
  close(): Promise<void>;
}
async function startFakeTarget(): Promise<FakeTarget> {
  const accepted: FakeConn[] = [];
  const waiters: ((c: FakeConn) => void)[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    const chunks: Buffer[] = [];
    let ended = false;
    socket.on('data', (c: Buffer) => chunks.push(c));
    const conn: FakeConn = {
      socket,
      received: () => Buffer.concat(chunks),
      ended: new Promise<void>((resolve) =>
        socket.on('end', () => {
          ended = true;
          resolve();
        }),
      ),
      hasEnded: () => ended,
    };
    const waiter = waiters.shift();
    if (waiter) waiter(conn);
    else accepted.push(conn);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as net.AddressInfo;
  return {
    port: address.port,
    nextConnection: () => {
      const ready = accepted.shift();
      return ready ? Promise.resolve(ready) : new Promise((resolve) => waiters.push(resolve));
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('pgTarget', () => {
  it('an IPv6 literal in DATABASE_URL is connected to without its brackets (npm start and migrate refused it as unreachable: getaddrinfo ENOTFOUND [::1])', () => {
    expect(pgTarget('postgres://postgres@[::1]:8950/postgres')).toEqual({ host: '::1', port: 8950 });
    expect(pgTarget('postgresql://u:p@[2001:db8::5]/db')).toEqual({ host: '2001:db8::5', port: 5432 });
    expect(pgTarget('postgres://postgres@127.0.0.1:5432/test')).toEqual({ host: '127.0.0.1', port: 5432 });
  });
});

describe('pg-ws-proxy', () => {
  let target: FakeTarget;
  let proxy: PgWsProxy;
  beforeAll(async () => {
    target = await startFakeTarget();
    proxy = await startPgWsProxy({ target: { host: '127.0.0.1', port: target.port } });
  });
  afterAll(async () => {
    await proxy.close();
    await target.close();
  });

  it('refuses a handshake a web page makes (it carries Origin): a page could dial 127.0.0.1 and get a Postgres session', async () => {
    const ws = new WebSocket(`ws://${proxy.url}/v1?address=example.invalid:1`, { perMessageDeflate: false, origin: 'https://attacker.example' });
    const status = await new Promise<number | string>((resolve) => {
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 'no status'));
      ws.once('open', () => resolve('opened'));
      ws.once('error', (err) => resolve(String(err)));
    });
    ws.terminate();
    expect(status).toBe(401);
    // Nothing reached the database, and a client without Origin (the drivers) still gets through.
    const ok = await openWs(proxy);
    ok.send(startupMessage({ user: 'postgres' }));
    const conn = await target.nextConnection();
    await until(() => conn.received().length > 0);
    ok.terminate();
    await until(() => proxy.activeConnections() === 0);
  });

  it('ends the TCP side on Terminate at the end of a larger chunk, without the client closing', async () => {
    const ws = await openWs(proxy);
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    const frame = Buffer.concat([startupMessage({ user: 'postgres', database: 'postgres' }), query('select 1'), TERMINATE]);
    ws.send(frame);
    const conn = await target.nextConnection();
    await conn.ended;
    expect(conn.received().equals(frame)).toBe(true);
    // The database then hangs up; the proxy passes that on to the client.
    conn.socket.end();
    expect(await closed).toBe(1000);
    await until(() => proxy.activeConnections() === 0);
  });

  it('does not mistake Terminate-looking bytes inside another message for Terminate', async () => {
    const ws = await openWs(proxy);
    ws.send(startupMessage({ user: 'postgres' }));
    const conn = await target.nextConnection();
    // CopyData whose payload ends with X 0 0 0 4, split across frames at awkward offsets.
    const copy = typed('d', Buffer.concat([Buffer.from('abc'), TERMINATE]));
    ws.send(copy.subarray(0, 3));
    ws.send(copy.subarray(3));
    await until(() => conn.received().subarray(-5).equals(TERMINATE));
    await new Promise((r) => setTimeout(r, 100));
    expect(conn.hasEnded()).toBe(false);
    // A real Terminate split across frames is still recognised.
    ws.send(TERMINATE.subarray(0, 2));
    ws.send(TERMINATE.subarray(2));
    await conn.ended;
    conn.socket.destroy();
    await until(() => proxy.activeConnections() === 0);
  });

  it('closes the TCP side when the client closes', async () => {
    const ws = await openWs(proxy);
    ws.send(startupMessage({ user: 'postgres' }));
    const conn = await target.nextConnection();
    ws.close();
    await conn.ended;
    conn.socket.destroy();
    await until(() => proxy.activeConnections() === 0);
  });

  it('closes the client when the database closes', async () => {
    const ws = await openWs(proxy);
    ws.send(startupMessage({ user: 'postgres' }));
    const conn = await target.nextConnection();
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
    conn.socket.destroy();
    await closed;
    await until(() => proxy.activeConnections() === 0);
  });

  it('close() terminates live connections', async () => {
    const own = await startPgWsProxy({ target: { host: '127.0.0.1', port: target.port } });
    const ws = await openWs(own);
    ws.send(startupMessage({ user: 'postgres' }));
    const conn = await target.nextConnection();
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
    await own.close();
    await closed;
    await conn.ended;
    conn.socket.destroy();
    expect(own.activeConnections()).toBe(0);
  });
});

describe('pg-ws-proxy against the test database', () => {
  let proxy: PgWsProxy;
  beforeAll(async () => {
    proxy = await startPgWsProxy({ target: pgTarget(databaseUrl) });
  });
  afterAll(async () => {
    await proxy.close();
  });

  async function backendsNamed(applicationName: string): Promise<number> {
    const { rows } = await withPg(databaseUrl, sharedProxy, (c) =>
      c.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where application_name = $1', [
        applicationName,
      ]),
    );
    return rows[0]?.n ?? -1;
  }

  it('a session ended with Terminate leaves no server connection behind', async () => {
    const applicationName = `wingsmith_unit_${process.pid}_${Date.now()}`;
    const user = new URL(databaseUrl).username || 'postgres';
    const database = new URL(databaseUrl).pathname.slice(1) || 'postgres';
    const ws = await openWs(proxy);
    let received = Buffer.alloc(0);
    ws.on('message', (data: Buffer) => {
      received = Buffer.concat([received, data]);
    });
    ws.send(startupMessage({ user, database, application_name: applicationName }));
    // ReadyForQuery ('Z', length 5) ends the startup exchange.
    await until(() => received.includes(Buffer.from([0x5a, 0, 0, 0, 5])));
    if (!embedded) expect(await backendsNamed(applicationName)).toBe(1);

    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
    ws.send(Buffer.concat([query('select 1'), TERMINATE]));
    await closed;
    await until(() => proxy.activeConnections() === 0);
    if (!embedded) {
      // The backend exits asynchronously after the socket closes.
      let n = -1;
      for (let i = 0; i < 50 && n !== 0; i++) {
        n = await backendsNamed(applicationName);
        if (n !== 0) await new Promise((r) => setTimeout(r, 20));
      }
      expect(n).toBe(0);
    }
  });

  it('the Neon driver round-trips through the proxy and releases its connection on end()', async () => {
    const rows = await withPg(databaseUrl, proxy.url, async (c) => {
      expect(proxy.activeConnections()).toBe(1);
      return (await c.query<{ b: Buffer }>('select $1::bytea as b', [Buffer.from([0x58, 0, 0, 0, 4])])).rows;
    });
    expect(rows[0]?.b.equals(Buffer.from([0x58, 0, 0, 0, 4]))).toBe(true);
    await until(() => proxy.activeConnections() === 0);
  });
});

describe('migrations', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'wingsmith-migrations-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('are idempotent: a second run applies nothing', async () => {
    const files = await readMigrations();
    expect(files.map((m) => m.file)).toContain('0001_clusters.sql');
    const again = await migrate(databaseUrl, sharedProxy);
    expect(again.applied).toEqual([]);
    expect(again.alreadyApplied).toEqual(expect.arrayContaining(files.map((m) => m.version)));
    const { rows } = await withPg(databaseUrl, sharedProxy, (c) =>
      c.query<{ version: string; name: string }>('select version, name from schema_migrations order by version'),
    );
    expect(rows.slice(0, files.length)).toEqual(files.map((m) => ({ version: m.version, name: m.name })));
  });

  it('a failing migration leaves neither its changes nor its record', async () => {
    const table = `wingsmith_unit_half_${process.pid}`;
    await writeFile(path.join(dir, '9999_breaks.sql'), `create table ${table} (x int);\nselect 1 / 0;\n-- trailing comment`);
    const broken = await readMigrations(dir);
    await expect(withPg(databaseUrl, sharedProxy, (c) => applyMigrations(c, broken))).rejects.toThrow(
      /9999_breaks\.sql failed: division by zero/,
    );
    const { rows } = await withPg(databaseUrl, sharedProxy, (c) =>
      c.query<{ t: string | null; recorded: boolean }>(
        `select to_regclass($1)::text as t, exists (select 1 from schema_migrations where version = '9999') as recorded`,
        [table],
      ),
    );
    expect(rows[0]).toEqual({ t: null, recorded: false });
  });

  it('rejects misnamed files instead of skipping them', async () => {
    const bad = await mkdtemp(path.join(tmpdir(), 'wingsmith-migrations-bad-'));
    try {
      await writeFile(path.join(bad, '2_oops.sql'), 'select 1;');
      await expect(readMigrations(bad)).rejects.toThrow(/0001_name\.sql/);
    } finally {
      await rm(bad, { recursive: true, force: true });
    }
  });
});

describe('dev stack on a real server', () => {
  const serverUrl = withDatabase(databaseUrl, 'postgres');
  async function databases(prefix: string): Promise<string[]> {
    const { rows } = await withPg(serverUrl, sharedProxy, (c) =>
      c.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1) order by 1', [prefix]),
    );
    return rows.map((r) => r.datname);
  }

  /** A stack for the body's length; its database (and copies) dropped after, whatever happens. */
  async function withStack<T>(options: DevStackOptions, body: (stack: DevStack) => Promise<T>): Promise<T> {
    const stack = await startDevStack(options);
    try {
      return await body(stack);
    } finally {
      await stack.dropDatabase?.();
      await stack.close();
    }
  }

  it.skipIf(embedded)('drops orphaned run databases but never one whose stack is alive', async () => {
    // A prefix of its own, so concurrent test runs on the same server are never touched.
    const prefix = `wingsmith_reaptest_${process.pid}_${Date.now().toString(36)}_`;
    const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-reap-'));
    await withPg(serverUrl, sharedProxy, (c) => c.query(`create database "${prefix}orphan"`));
    try {
      await withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}a`, reapStaleDatabases: prefix }, async (a) => {
        expect(await databases(prefix)).toEqual([`${prefix}a`]);
        expect(a.migrations.applied.length).toBeGreaterThan(0);
        await withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}b`, reapStaleDatabases: prefix }, async () => {
          expect(await databases(prefix)).toEqual([`${prefix}a`, `${prefix}b`]);
        });
      });
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
    expect(await databases(prefix)).toEqual([]);
    // Two stacks, each migrating a database from scratch: 35 s in a CI run with the suite beside it.
  }, 90_000);

  it.skipIf(embedded)('a stack whose name ends in hex starting with f keeps its template and copies from another run\'s reaper, and two such stacks run at once', async () => {
    // Test databases are `wingsmith_test_<hex>`: one run in sixteen has a name like these.
    const prefix = `wingsmith_hextest_${process.pid}_${Date.now().toString(36)}_`;
    const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-hex-'));
    try {
      await withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}f0a1`, template: true }, async (a) => {
        await copyDatabase(a.databaseUrl, a.pgWsProxy, a.templateDatabase as string);
        const mine = async () => (await databases(prefix)).filter((d) => d.startsWith(`${prefix}f0a1`));
        expect(await mine()).toHaveLength(3);
        // A second stack of the same shape starts beside it (it waited on the first's lease before)
        // and its reaper leaves the first's databases alone.
        const second = withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}fb2c`, reapStaleDatabases: prefix }, async () => {
          expect(await mine()).toHaveLength(3);
        });
        const waited = await Promise.race([second.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), 60_000))]);
        expect(waited, 'the second stack waited on the first one\'s lease').toBe(false);
      });
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
    expect(await databases(prefix)).toEqual([]);
  }, 120_000);

  it.skipIf(embedded)('copies of a stack\'s template are migrated databases of their own, kept while the stack lives and dropped with it', async () => {
    const prefix = `wingsmith_copytest_${process.pid}_${Date.now().toString(36)}_`;
    const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-copy-'));
    try {
      await withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}a`, template: true }, async (a) => {
        expect(a.templateDatabase).toBe(`${prefix}a__tpl`);
        const one = await copyDatabase(a.databaseUrl, a.pgWsProxy, a.templateDatabase as string);
        const two = await copyDatabase(a.databaseUrl, a.pgWsProxy, a.templateDatabase as string);
        expect(one).not.toBe(two);
        // Each copy has the schema, and what is written in one is not in the other.
        const has = async (url: string, table: string) =>
          (await withPg(url, a.pgWsProxy, (c) => c.query<{ t: string | null }>('select to_regclass($1)::text as t', [table]))).rows[0]?.t === table;
        expect(await has(one, 'clusters')).toBe(true);
        expect(await has(two, 'clusters')).toBe(true);
        await withPg(one, a.pgWsProxy, (c) => c.query('create table scratch (x int)'));
        expect(await has(one, 'scratch')).toBe(true);
        expect(await has(two, 'scratch')).toBe(false);
        // Another stack's reaper leaves a live stack's copies alone.
        await withStack({ databaseUrl: serverUrl, dataDir, createDatabase: `${prefix}b`, reapStaleDatabases: prefix }, async () => {
          expect((await databases(prefix)).filter((d) => d.startsWith(`${prefix}a`))).toHaveLength(4);
        });
      });
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
    expect(await databases(prefix)).toEqual([]);
  }, 90_000);
});
