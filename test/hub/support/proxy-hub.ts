import { afterAll, inject } from 'vitest';
import { startPgWsProxy, type PgWsProxy } from '../../../scripts/lib/pg-ws-proxy';
import { useHub, type HubHandle } from './hub';

/**
 * A hub for this test file that reaches the run's database through a proxy the file owns, so the
 * file can cut Postgres at the network (`proxyDown`) and bring it back on the same port
 * (`proxyUp`). The proxy is closed after the file.
 */
export function useHubBehindProxy(vars: Record<string, string>): { h: HubHandle; proxyUp(): Promise<void>; proxyDown(): Promise<void> } {
  let proxy: PgWsProxy | null = null;
  let port = 0;
  let target = { host: '127.0.0.1', port: 5432 };
  /** Idempotent: a test's cleanup may call it whether or not its body did. */
  const proxyUp = async (): Promise<void> => {
    if (proxy) return;
    proxy = await startPgWsProxy({ target, port });
    port = proxy.port;
  };
  const proxyDown = async (): Promise<void> => {
    await proxy?.close();
    proxy = null;
  };
  const h = useHub(vars, async () => {
    // The same database the run uses, through the shared proxy's own target.
    const { findProxyTarget } = await import('./proxy-target');
    target = await findProxyTarget(inject('databaseUrl'), inject('pgWsProxy'));
    await proxyUp();
    return { PG_WS_PROXY: `127.0.0.1:${port}` };
  });
  afterAll(proxyDown);
  return { h, proxyUp, proxyDown };
}

/**
 * A hub for this test file whose path to Postgres runs through a TCP relay the file owns (between
 * the WS→TCP proxy and the database), so the file can hold, cut or inspect the database's bytes.
 * `relay()` is the relay once the hub has started; relay and proxy are closed after the file.
 */
export function useHubBehindRelay<R extends { port: number; close(): void }>(
  vars: Record<string, string>,
  startRelay: (target: { host: string; port: number }) => Promise<R>,
): { h: HubHandle; relay(): R } {
  let relay: R | null = null;
  let proxy: PgWsProxy | null = null;
  const h = useHub(vars, async () => {
    const { findProxyTarget } = await import('./proxy-target');
    relay = await startRelay(await findProxyTarget(inject('databaseUrl'), inject('pgWsProxy')));
    proxy = await startPgWsProxy({ target: { host: '127.0.0.1', port: relay.port } });
    return { PG_WS_PROXY: `127.0.0.1:${proxy.port}` };
  });
  afterAll(async () => {
    relay?.close();
    await proxy?.close();
  });
  return {
    h,
    relay: () => {
      if (!relay) throw new Error('the hub (and its relay) has not started');
      return relay;
    },
  };
}
