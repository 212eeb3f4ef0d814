/**
 * A connect to the database whose socket opened and whose path then stalled (the database's
 * answer to the startup never comes; the socket stays up) is given up, and the next statement
 * opens a new connection. The driver's own connect timeout only closes the socket and waits for
 * the close event, which in workerd an open socket gets only when the peer answers the close: on
 * that path, never. The connect never settled, every later statement of that connection waited
 * on it and failed unsent (503), and nothing opened another until the path answered again.
 * Found by a read-only review of the hub under a stalled Postgres; fails on the code before.
 *
 * The relay sits between workerd and the WebSocket proxy: it lets a new link's upgrade through,
 * then holds everything on it.
 */
import net from 'node:net';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

interface Relay {
  port: number;
  /** New links: the upgrade's answer passes, then nothing more either way. */
  stallAfterUpgrade(on: boolean): void;
  cutOpen(): void;
  close(): void;
}

async function startUpgradeStallRelay(target: { host: string; port: number }): Promise<Relay> {
  let stallNew = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    sockets.add(client);
    sockets.add(upstream);
    let stalled = false;
    const stallThis = stallNew;
    client.on('data', (chunk) => {
      if (!stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (stalled) return;
      client.write(chunk);
      if (stallThis && chunk.includes('\r\n\r\n')) stalled = true;
    });
    for (const s of [client, upstream]) {
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    client.on('end', () => !stalled && upstream.end());
    upstream.on('end', () => !stalled && client.end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    stallAfterUpgrade: (on) => void (stallNew = on),
    cutOpen: () => {
      for (const s of sockets) s.destroy();
    },
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

let relay: Relay | null = null;
const h = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '2000', DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' }, async () => {
  const [host, port] = inject('pgWsProxy').split(':');
  relay = await startUpgradeStallRelay({ host: host as string, port: Number(port) });
  return { PG_WS_PROXY: `127.0.0.1:${relay.port}` };
});
afterAll(() => relay?.close());

describe('a connect stalled after its socket opened', () => {
  it('is given up, and a later statement opens a new connection and is answered', async () => {
    const c = await h.newCluster('connect-stall');
    expect((await h.admin('GET', `/clusters/${c.name}`)).status).toBe(200);
    // The shard's connection goes; the one that replaces it opens its socket, then stalls.
    relay!.stallAfterUpgrade(true);
    relay!.cutOpen();
    await sleep(300);
    const during = await h.admin('GET', `/clusters/${c.name}`);
    expect(during.status, JSON.stringify(during.json)).toBe(503);
    // New links flow again; the stalled one stays stalled, as a dead path does.
    relay!.stallAfterUpgrade(false);
    let answered = 0;
    const until = Date.now() + 15_000;
    while (Date.now() < until) {
      const r = await h.admin('GET', `/clusters/${c.name}`);
      if (r.status === 200) {
        answered = r.status;
        break;
      }
      await sleep(500);
    }
    expect(answered, 'a statement answered within 15 s of the stall (the driver gives a connect 5 s)').toBe(200);
  }, 60_000);
});
