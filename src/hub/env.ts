import type { PgConfig } from './pg';

/** Bindings and configuration of the hub Worker (see wrangler.toml and the README). */
export interface HubEnv extends PgConfig {
  SESSIONS: DurableObjectNamespace;
  /** Shards of shared, long-lived Postgres connections (src/hub/db/gateway.ts). */
  DB_GATEWAY: DurableObjectNamespace;
  ADMIN_TOKEN: string;
  /** The plane's release line; operators of another major are refused. */
  HUB_VERSION: string;
  /** Counts connects refused for an unknown token per client address (connect-refusals.ts); optional. */
  CONNECT_REFUSALS?: RateLimit;
}
