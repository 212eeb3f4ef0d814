/**
 * A TCP relay a test owns on the hub's path to Postgres, to make the path misbehave as networks
 * do: `stallOpen()` stalls the links open now (their bytes are held, in order; the sockets stay
 * up), while links opened after it flow; `releaseHeld()` delivers the held bytes, as TCP does when
 * such a path heals; `cutOpen()` drops the links open now (a proxy restart); `restartSlowly()`
 * drops them and holds new ones until `releaseHeld()` (a database restart, slow to accept).
 */
import net from 'node:net';

interface Link {
  stalled: boolean;
  held: Array<() => void>;
}

export interface StallRelay {
  port: number;
  stallOpen(): void;
  releaseHeld(): void;
  cutOpen(): void;
  restartSlowly(): void;
  /** Chunks (and ends) held now, over all links: for a test's failure message. */
  heldCount(): number;
  close(): void;
}

export async function startStallRelay(target: { host: string; port: number }): Promise<StallRelay> {
  const links = new Set<Link>();
  const sockets = new Set<net.Socket>();
  let holdNew = false;
  const pipe = (link: Link, from: net.Socket, to: net.Socket): void => {
    from.on('data', (chunk) => {
      const send = () => {
        if (!to.destroyed) to.write(chunk);
      };
      if (link.stalled) link.held.push(send);
      else send();
    });
    from.on('end', () => {
      const f = () => to.end();
      if (link.stalled) link.held.push(f);
      else f();
    });
    from.on('error', () => undefined);
  };
  const relay = net.createServer((client) => {
    const upstream = net.connect(target);
    const link: Link = { stalled: holdNew, held: [] };
    links.add(link);
    sockets.add(client);
    sockets.add(upstream);
    pipe(link, client, upstream);
    pipe(link, upstream, client);
    const forget = () => {
      if (client.destroyed && upstream.destroyed) links.delete(link);
    };
    client.on('close', forget);
    upstream.on('close', forget);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', () => r()));
  const cutOpen = () => {
    for (const s of sockets) s.destroy();
  };
  const releaseHeld = () => {
    holdNew = false;
    for (const l of links) {
      l.stalled = false;
      for (const f of l.held.splice(0)) f();
    }
  };
  return {
    port: (relay.address() as net.AddressInfo).port,
    stallOpen: () => {
      for (const l of links) l.stalled = true;
    },
    releaseHeld,
    cutOpen,
    heldCount: () => [...links].reduce((n, l) => n + l.held.length, 0),
    restartSlowly: () => {
      holdNew = true;
      cutOpen();
    },
    close: () => {
      releaseHeld();
      cutOpen();
      relay.close();
    },
  };
}
