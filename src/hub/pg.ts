import { Client, neonConfig } from '@neondatabase/serverless';
import { describeError, sqlState } from './db/errors';
import { withDeadline } from './deadline';
import { HandOver } from './pg-handover';
import { ConnectionLostError, lostUnder, QueryTimeoutError } from './pg-errors';
import type { Sql } from './db/sql';

/** What the hub needs to reach Postgres. */
export interface PgConfig {
  DATABASE_URL: string;
  /**
   * Local development only: `host:port` of the WebSocket→TCP proxy in front of a plain Postgres.
   * Unset in production, where the Neon driver talks to Neon's own WebSocket endpoint.
   */
  PG_WS_PROXY?: string;
}

export interface QueryResultRows<R> {
  rows: R[];
  rowCount: number | null;
}

/**
 * How much longer than the server lets a statement run (`statement_timeout`) the gateway waits
 * for its answer: a fifth of the deadline, at most 400 ms. The server's clock starts when the
 * statement arrives, ours when it is sent: with equal deadlines an admin write the hub had given
 * up on (and answered a caller for) could still commit. Waiting a round trip and a commit longer
 * brings the server's refusal back first, a definite "not applied". The sessions' own connections
 * keep one deadline: an ingest statement's unknown outcome is handled there (a 1013 close).
 */
export function answerMarginMs(queryTimeoutMs: number): number {
  return Math.min(400, Math.round(queryTimeoutMs / 5));
}

let proxyConfigured: string | undefined;
let connections = 0;

function configure(config: PgConfig): void {
  if (!config.PG_WS_PROXY || proxyConfigured === config.PG_WS_PROXY) return;
  const proxy = config.PG_WS_PROXY;
  // The proxy is pinned to one Postgres; the address the driver appends is ignored there.
  neonConfig.wsProxy = () => `${proxy}/v1`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  proxyConfigured = proxy;
}

export interface PgOptions {
  /** Close the connection after this long without a query, so an idle object can hibernate. */
  idleCloseMs?: number;
  /** Deadline per query; a stalled database must not wedge a session. */
  queryTimeoutMs?: number;
  /**
   * How long a statement waits for a row lock before failing (55P03) on this connection. Shorter
   * than the query deadline, so a lock held elsewhere fails one statement quickly, on a
   * connection that survives, and the ingest pipeline can isolate the frame that waited.
   */
  lockTimeoutMs?: number;
  connectTimeoutMs?: number;
  /**
   * How long a statement waits for a connection before it is not sent at all (default: the query
   * deadline). Once sent it has a whole query deadline, on the server too (statement_timeout
   * counts from its arrival), so a caller that gives up at a fixed time after asking (the
   * gateway's, `viaGateway`) needs a statement sent by then less that deadline, or one sent
   * after a slow connect (a database restarting, a compute waking) could commit after the caller
   * answered "retry".
   */
  sendWithinMs?: number;
  /** Wait this much longer for an answer than the server lets the statement run (`answerMarginMs`). Default 0. */
  answerMarginMs?: number;
}

/**
 * Statements one connection hands its driver at once (pg-handover.ts `maxInDriver`): enough that
 * the driver always has the next to send when an answer comes (it sends one at a time), few enough
 * that an admin write, which goes ahead of those still waiting, waits behind a handful of round
 * trips and not behind a flood's whole queue.
 */
const DRIVER_DEPTH = 8;

/**
 * Low statements (token lookups) one connection keeps waiting at once; more are refused unsent (the
 * connect answers 503, Retry-After). A connect storm of a thousand operators spreads its lookups
 * over every gateway connection, well under this; a flood's backlog stays this small.
 */
const LOW_WAITING = 256;

/**
 * A lazily connected, self-closing Postgres connection. Held in a Durable Object field it costs
 * one connect per burst of activity instead of one per message (~0.7 ms against ~22 ms per
 * statement, measured locally); closing when idle lets the object hibernate.
 */
export class Pg {
  private client: Client | null = null;
  private connecting: Promise<Client> | null = null;
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the last statement ended (the idle period counts from there). */
  private idleSince = 0;
  private inFlight = 0;
  private connectionTag = '';
  /** The prepared statements' names on the current connection, as sent (with the tag). */
  private prepared = new Set<string>();
  /** When the connection last answered anything (or opened). */
  private progressAt = 0;
  private readonly idleCloseMs: number;
  private readonly queryTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly lockTimeoutMs: number | undefined;
  private readonly sendWithinMs: number;
  private readonly answerMarginMs: number;
  /** When statements reach the driver: strict ones alone, and never past their send-by time. */
  private readonly handOver: HandOver;

  constructor(
    private readonly config: PgConfig,
    options: PgOptions = {},
  ) {
    this.idleCloseMs = options.idleCloseMs ?? 3_000;
    this.queryTimeoutMs = options.queryTimeoutMs ?? 10_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 5_000;
    this.lockTimeoutMs = options.lockTimeoutMs;
    this.sendWithinMs = options.sendWithinMs ?? this.queryTimeoutMs;
    this.answerMarginMs = options.answerMarginMs ?? 0;
    this.handOver = new HandOver(
      () => {
        if (this.client) this.discard(this.client);
      },
      (ms) => new ConnectionLostError(`the connection was busy for ${ms} ms; the statement was not sent`),
      DRIVER_DEPTH,
      // What the driver's own deadline (`query_timeout`) would have given it, queued there.
      this.queryTimeoutMs + this.answerMarginMs,
      LOW_WAITING,
    );
  }

  /**
   * This connection, for statements that must be sent within `ms` of being asked for or not at all
   * (`sendWithinMs`, for a caller that has already waited part of its time: a coalesced write),
   * whether they wait for the connection to open or for the statements before them: each is
   * handed to the driver only when nothing else is in it, and one still waiting at its send-by
   * time is not sent. Left to the driver's own queue, a write behind a slow statement was sent
   * when that one ended, however late, and could commit after its caller's 503 "retry". (Other
   * statements queue in the driver as before: a connect storm's token lookups and claims, held
   * to the same bound, were refused by the thousand and retried into a collapse.)
   */
  within(ms: number): Sql {
    // One send-by time for every statement of the caller: its wait started once.
    const sendBy = Date.now() + Math.max(0, Math.min(ms, this.sendWithinMs));
    return { query: (text, params, name) => this.run(text, params ?? [], name, Math.max(0, sendBy - Date.now()), true) };
  }

  /**
   * This connection, for statements anyone can cause without a credential (the connect route's
   * token lookup): they wait behind every other statement still waiting to be handed to the
   * driver (pg-handover.ts), so a flood of them holds up the hub's own work by what is already in
   * the driver at most.
   */
  get low(): Sql {
    return { query: (text, params, name) => this.run(text, params ?? [], name, this.sendWithinMs, false, true) };
  }

  /** Statements in flight (queued on the connection or running). */
  get inFlightCount(): number {
    return this.inFlight;
  }

  get isOpen(): boolean {
    return this.client !== null;
  }

  /**
   * `name` makes it a prepared statement on this connection: parsed and planned once per
   * connection instead of on every call (every statement on a hot path has one). Dropped again
   * when the connection closes (`deallocate`).
   */
  query<R = Record<string, unknown>>(text: string, params: unknown[] = [], name?: string): Promise<QueryResultRows<R>> {
    return this.run<R>(text, params, name, this.sendWithinMs, false);
  }

  private async run<R = Record<string, unknown>>(
    text: string,
    params: unknown[],
    name: string | undefined,
    sendWithinMs: number,
    strict: boolean,
    low = false,
  ): Promise<QueryResultRows<R>> {
    // The idle timer is left running: it finds the statement in flight and does nothing.
    this.inFlight++;
    const askedAt = Date.now();
    let number = -1;
    let answered = false;
    try {
      const handed = this.handOver.next(strict, sendWithinMs, low);
      number = typeof handed === 'number' ? handed : await handed;
      // A strict statement's send-by time counts from when it was asked for; another's wait for the
      // connection, from when its turn came (its wait for the turn is bounded by the hand-over).
      const client = await this.connectWithin(strict ? sendWithinMs - (Date.now() - askedAt) : sendWithinMs);
      try {
        // Unique per connection: an embedded Postgres (PGlite) runs every connection in one
        // backend, where a fixed name would collide with another connection's statement.
        const tagged = name ? `${name}_${this.connectionTag}` : null;
        const result = await (tagged ? client.query({ name: tagged, text, values: params }) : client.query(text, params));
        // Recorded once it ran, and only for the connection still held: a name whose parse
        // failed, or another connection's, does not exist here, and one missing name would fail
        // the whole list at close.
        if (tagged && this.client === client) this.prepared.add(tagged);
        this.progressAt = Date.now();
        answered = true;
        return { rows: result.rows as R[], rowCount: result.rowCount };
      } catch (err) {
        if (!isReadTimeout(err)) {
          // The server answered (an SQL error is progress too), or the connection is gone.
          answered = true;
          if (this.client === client) this.progressAt = Date.now();
          if (lostUnder(err)) throw new ConnectionLostError(`connection lost under the statement, which may still commit: ${describeError(err)}`, null, true);
          throw err;
        }
        // Busy is not stalled: discarding a connection that is still answering would fail every
        // statement queued on it and reconnect under the very load that made this one late
        // (a connect storm's claims and token lookups collapsed that way). (A strict statement was
        // handed over alone, after the last answer: running out its deadline, it is stalled here.)
        if (Date.now() - this.progressAt >= this.queryTimeoutMs) this.discard(client);
        else this.handOver.suspect(number);
        throw new QueryTimeoutError(this.queryTimeoutMs);
      }
    } finally {
      if (number >= 0) this.handOver.settled(number, answered);
      this.inFlight--;
      this.armIdle();
    }
  }

  /** Close now (e.g. when the session ends). */
  async close(): Promise<void> {
    this.clearIdle();
    const client = this.client;
    const prepared = [...this.prepared];
    this.client = null;
    this.handOver.connectionGone();
    this.connecting = null;
    this.prepared.clear();
    if (!client) return;
    if (prepared.length > 0) await deallocate(client, prepared);
    await withDeadline(client.end().catch(() => undefined), END_WAIT_MS, () => undefined);
  }

  /**
   * The connection, waited for at most `ms` (`sendWithinMs`): a statement still waiting for a
   * connection then is never sent. Sent later, with a whole deadline of its own, it could commit
   * after its caller gave up (the gateway's caller answers 503 "retry"). The connect itself goes
   * on, for the statements after it.
   */
  private connectWithin(ms: number): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (ms <= 0) return Promise.reject(new ConnectionLostError('no connection to the database in time; the statement was not sent'));
    return withDeadline(this.connect(), ms, () => {
      throw new ConnectionLostError(`no connection to the database within ${ms} ms; the statement was not sent`);
    });
  }

  private connect(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (this.connecting) return this.connecting;
    configure(this.config);
    const client = new Client({
      connectionString: this.config.DATABASE_URL,
      connectionTimeoutMillis: this.connectTimeoutMs,
      // The driver's own deadline, from the moment a statement is asked for: one still queued is
      // dropped from the queue, so a statement nobody waits for never runs.
      query_timeout: this.queryTimeoutMs + this.answerMarginMs,
      // The server gives up too: a statement we stopped waiting for must not commit much later
      // (and, with a margin, first: `answerMarginMs`).
      statement_timeout: this.queryTimeoutMs,
      ...(this.lockTimeoutMs !== undefined ? { lock_timeout: Math.max(1, Math.round(this.lockTimeoutMs)) } : {}),
    });
    const drop = () => {
      if (this.client !== client) return;
      this.client = null;
      this.handOver.connectionGone();
    };
    client.on('error', drop);
    client.on('end', drop);
    // Bounded here too: the driver's own timeout only closes the socket and waits for the close
    // event, which in workerd an open socket gets only when the peer answers the close. On a path
    // that stalled after the socket opened, the connect never settled, and every later statement
    // of this connection waited on it and failed unsent until the path answered again.
    const connectWithin = this.connectTimeoutMs + CONNECT_GRACE_MS;
    this.connecting = withDeadline(client.connect(), connectWithin, () => {
      throw new Error(`no connection to the database within ${connectWithin} ms`);
    })
      .then(() => {
        this.client = client;
        this.progressAt = Date.now();
        this.connectionTag = (++connections).toString(36) + Math.random().toString(36).slice(2, 8);
        this.prepared.clear();
        // Every statement that asked for it may have given up waiting (connectWithin): a
        // connection nobody uses must still close when idle.
        this.armIdle();
        return client;
      })
      .catch((err: unknown) => {
        client.end().catch(() => undefined);
        throw new ConnectionLostError(err instanceof Error ? err.message : String(err), sqlState(err));
      })
      .finally(() => {
        this.connecting = null;
      });
    return this.connecting;
  }

  private discard(client: Client): void {
    if (this.client === client) {
      this.client = null;
      this.handOver.connectionGone(); // what ran out its deadline ran there
    }
    client.end().catch(() => undefined);
  }

  private clearIdle(): void {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
  }

  /**
   * Close once the connection has been idle for `idleCloseMs`. One timer stays armed across
   * statements and, when it fires early, re-arms for what is left: cancelling and re-arming it
   * around every statement cost more than the gateway's statements on a burst of admin writes
   * (clearTimeout and setTimeout were 7% of the isolate in a desired-burst profile).
   */
  private armIdle(): void {
    if (this.inFlight > 0 || !this.client) return;
    this.idleSince = Date.now();
    if (this.idleTimer) return;
    this.idleTimer = setTimeout(() => this.idleTimerFired(), this.idleCloseMs);
  }

  private idleTimerFired(): void {
    this.idleTimer = null;
    if (this.inFlight > 0 || !this.client) return;
    const left = this.idleSince + this.idleCloseMs - Date.now();
    if (left > 0) this.idleTimer = setTimeout(() => this.idleTimerFired(), left);
    else void this.close();
  }
}

/** How long a closing connection waits for its statements to be dropped before it just closes. */
const DEALLOCATE_WAIT_MS = 1_000;

/**
 * How long `close` waits for the driver's end(). By then Terminate is written; what end() waits
 * for is the WebSocket's closing handshake, which a stalled link never completes (workerd reports
 * no close until the peer answers), so an unbounded wait kept the retention alarm that closes a
 * session's connection from ever returning. Nothing rides on it: no statement is outstanding that
 * could commit late, and the server drops the backend on Terminate or when the socket goes. A
 * constant, not the query deadline: a healthy link answers in one round trip, and a longer wait
 * only keeps the caller (an alarm, an object that would sleep) awake for nothing.
 */
const END_WAIT_MS = 1_000;
/** How long past the driver's own connect timeout a connect is waited for before it is given up. */
const CONNECT_GRACE_MS = 1_000;

/**
 * Drop the named statements before closing. Postgres drops them with the connection anyway; an
 * embedded Postgres (PGlite, `npm start` without a server) runs every connection in one backend,
 * where they would otherwise outlive it and pile up for as long as the hub runs. By name, never
 * `DEALLOCATE ALL`: there that would drop the other connections' statements too. Best effort: a
 * pooler that renamed them answers an error, and a stalled server is not waited on.
 */
async function deallocate(client: Client, names: string[]): Promise<void> {
  const dropped = client.query(names.map((n) => `deallocate "${n}"`).join('; ')).then(
    () => undefined,
    () => undefined,
  );
  await withDeadline(dropped, DEALLOCATE_WAIT_MS, () => undefined);
}

/** The driver's `query_timeout` rejection (node-postgres words it so). */
function isReadTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === 'Query read timeout';
}

/** One statement on a connection of its own, for stateless Worker requests. */
export async function queryOnce<R = Record<string, unknown>>(
  config: PgConfig,
  text: string,
  params: unknown[] = [],
  options: PgOptions = {},
): Promise<QueryResultRows<R>> {
  const pg = new Pg(config, { ...options, idleCloseMs: 0 });
  try {
    return await pg.query<R>(text, params);
  } finally {
    await pg.close();
  }
}
