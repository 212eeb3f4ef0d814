/**
 * A TCP relay that delays every chunk, both ways, by a fixed time (in order): the hub's path to
 * a database in another region, where each statement holds its connection for a round trip.
 */
import net from 'node:net';

export interface LatencyRelay {
  port: number;
  close(): void;
}

export function latencyRelay(oneWayMs: number): (target: { host: string; port: number }) => Promise<LatencyRelay> {
  return async (target) => {
    const sockets = new Set<net.Socket>();
    const pipe = (from: net.Socket, to: net.Socket): void => {
      let last = 0;
      const later = (f: () => void) => {
        // Never before a chunk sent earlier: TCP keeps order.
        const at = Math.max(Date.now() + oneWayMs, last);
        last = at;
        setTimeout(f, at - Date.now());
      };
      from.on('data', (chunk) => later(() => !to.destroyed && to.write(chunk)));
      from.on('end', () => later(() => to.end()));
      from.on('error', () => undefined);
    };
    const server = net.createServer((client) => {
      const upstream = net.connect(target);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
      }
      pipe(client, upstream);
      pipe(upstream, client);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    return {
      port: (server.address() as net.AddressInfo).port,
      close: () => {
        for (const s of sockets) s.destroy();
        server.close();
      },
    };
  };
}
