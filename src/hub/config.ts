import { z } from 'zod';
import { releaseMajor } from '../protocol/operator-version';
import { MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES } from '../protocol/vocabulary';
import { minSendQueueBytes, QUEUE_RESERVE_BYTES, REPLAY_ROW_MAX_BYTES } from './frame-budget';
import { hintOutsideJurisdiction, JURISDICTIONS, LOCATION_HINTS, REGION_NAME_RE } from './region';

/**
 * Hub configuration from Worker vars. The timers the spec fixes are configuration with the
 * spec's values as defaults, so tests can run them fast.
 */
/** The longest history retention: a century (Postgres timestamps end in 4713 BC). */
export const HISTORY_RETENTION_MAX_MS = 100 * 365 * 24 * 3_600_000;
const ms = (d: number) => z.coerce.number().int().positive().default(d);
/** A retention horizon: at most a century, which Postgres can still compute back from now. */
const retention = (d: number) =>
  z.coerce
    .number()
    .int()
    .positive()
    .max(HISTORY_RETENTION_MAX_MS, `must be at most ${HISTORY_RETENTION_MAX_MS} (100 years): Postgres cannot reach a horizon much further back`)
    .default(d);
/**
 * The largest value Postgres's integer holds. A var the hub hands to Postgres as one (a
 * connection's statement_timeout, the claim's contention threshold) must fit it: a larger one
 * fails every connection or every claim, which the hub can only take for a database outage.
 */
export const PG_INT_MAX = 2_147_483_647;
const pgInt = (name: string) => z.number().max(PG_INT_MAX, `must be at most ${PG_INT_MAX}: Postgres holds ${name} as an integer`);
/** An optional var: unset and empty are the same (a blank line in a config must not mean "set"). */
const optional = <T extends z.ZodType>(t: T) => z.preprocess((v) => (v === '' ? undefined : v), t.optional());
const flag = z.preprocess((v) => (v === '' || v === undefined ? false : v), z.union([z.boolean(), z.enum(['1', 'true', '0', 'false'])]))
  .transform((v) => v === true || v === '1' || v === 'true');

/**
 * The liveness timers an operator accepts from a welcome (src/operator/handshake.ts,
 * boundedLimits, after the spec's "ping every 10s" and "no frame of any kind for 30s"): a ping
 * interval of 1–10 s and an idle limit of two ping intervals to 30 s. Outside them the SDK uses
 * the spec's own 10 s and 30 s instead, so a hub whose silence rule is shorter than two of the
 * pings it actually gets cuts idle, healthy sessions again and again. Kept here rather than imported so the hub does not
 * depend on the SDK; test/unit/hub-config-refusals.test.ts holds the two to the same bounds.
 */
export const PING_INTERVAL_BOUNDS_MS = [1_000, 10_000] as const;
export const IDLE_TIMEOUT_MAX_MS = 30_000;
/**
 * The largest replay window an operator keeps as advertised (handshake.ts, boundedLimits): past
 * it the SDK uses its own default window (10,000 frames, 64 MiB), since the window bounds what it
 * holds unacknowledged in memory and on disk. Held to the SDK's bounds by hub-config-refusals.test.ts.
 */
export const REPLAY_BUFFER_MAX = { frames: 100_000, bytes: 256 << 20 } as const;

/**
 * The most a desired-state page (its bytes, one frame it may overshoot by, and the send queue's
 * reserve) may come to. Pages come back from the gateway object over Durable Object RPC, which
 * refuses a value over 32 MiB; the rest is room for what the RPC's serialization adds to the
 * frames' own bytes (row objects, strings that are not one byte per character).
 */
export const DESIRED_PAGE_RPC_BUDGET_BYTES = 24 << 20;

const ConfigSchema = z.object({
  /**
   * The plane's release line: every hello's operator_version is checked against its major, which
   * throws for a version that is not release-shaped, so such a value would refuse every operator.
   */
  HUB_VERSION: z.string().max(128, 'at most 128 characters')
    .refine((v) => releaseMajor(v) !== null, 'must be a release version, x.y.z (e.g. 0.1.0): operators are admitted by its major')
    .default('0.1.0'),
  /** No hello within this long after the upgrade: close 4408. */
  HANDSHAKE_TIMEOUT_MS: ms(10_000),
  /** The ping cadence advertised to operators (1–10 s); the hub itself only advertises it. */
  PING_INTERVAL_MS: ms(10_000),
  /** No frame of any kind for this long: the connection is dead (4408). Two ping intervals to 30 s. */
  IDLE_TIMEOUT_MS: ms(30_000),
  /** The fleet poll's interval: claim, registration, disablement, token rotation, desired revision. */
  POLL_INTERVAL_MS: ms(5_000),
  /** A registered session not heard from this long is poked anyway (an object that ended silently). */
  LIVE_SWEEP_MS: ms(5 * 60_000),
  /** Most sessions one poller pokes per interval (the rest wait for the next). */
  POLL_POKE_LIMIT: ms(1_000),
  /**
   * A claim pokes the session it displaced at once ('on'); 'off' leaves it to the fleet poll, so
   * a test can prove the poll is the bound when a poke is lost.
   */
  DISPLACEMENT_POKE: z.enum(['on', 'off']).default('on').transform((v) => v === 'on'),
  /** A frame left unapplied (transient failure) this long makes the hub close so the peer replays. */
  HOLE_TIMEOUT_MS: ms(30_000),
  /**
   * Frame bytes the session objects of one isolate may hold unapplied together (the database slow
   * or away), past which a session that receives more closes 1013 for the operator to replay
   * later (session/isolate-hold.ts): the objects of an isolate share its memory limit.
   */
  ISOLATE_UNAPPLIED_BYTES: ms(32 << 20),
  /** An object whose session has had no connection this long deletes its storage. */
  RETENTION_MS: ms(15 * 60_000),
  /**
   * Events, rejections and concluded operations' progress older than this are deleted. At most a
   * century: Postgres cannot compute a horizon thousands of years back (22008), and a longer
   * setting would make every pass fail instead of keeping everything.
   */
  HISTORY_RETENTION_MS: retention(30 * 24 * 3_600_000),
  /**
   * An operation whose conclusion (or, never concluded, whose deadline) is older than this is
   * deleted, with its idempotency key, once none of its history is left: a shorter setting than
   * HISTORY_RETENTION_MS never takes an operation's reports before their time. At most a century,
   * as history.
   */
  OPERATIONS_RETENTION_MS: retention(90 * 24 * 3_600_000),
  /** How often each fleet poller runs a retention pass (sooner while a backlog remains). */
  HISTORY_PRUNE_INTERVAL_MS: ms(10 * 60_000),
  /** Most rows of each history table one retention pass deletes. */
  HISTORY_PRUNE_BATCH: ms(10_000),
  /** Larger frames → close 1009; also the largest desired state the admin API accepts (413 over it). */
  MAX_FRAME_BYTES: z.coerce
    .number()
    .int()
    .min(MIN_FRAME_LIMIT_BYTES, `must be at least ${MIN_FRAME_LIMIT_BYTES}: operators ignore a smaller limit`)
    // Advertised in the welcome: the platform takes no larger WebSocket message, and an operator
    // told it may send one would be cut by the runtime, not refused by the hub.
    .max(MAX_FRAME_LIMIT_BYTES, `must be at most ${MAX_FRAME_LIMIT_BYTES} (32 MiB): no larger WebSocket message reaches a Durable Object, and operators ignore a larger limit`)
    .default(1 << 20),
  /** Sized for a rolling restart, not a network hiccup. */
  REPLAY_BUFFER_FRAMES: ms(50_000).pipe(z.number().max(REPLAY_BUFFER_MAX.frames, `must be at most ${REPLAY_BUFFER_MAX.frames} (operators ignore a larger window and use 10000)`)),
  REPLAY_BUFFER_BYTES: ms(64 << 20).pipe(z.number().max(REPLAY_BUFFER_MAX.bytes, `must be at most ${REPLAY_BUFFER_MAX.bytes} (operators ignore a larger window and use 64 MiB)`)),
  /**
   * Frames waiting for the operator to release the replay window; full → 4429. At least 3: a
   * desired page is what is left after the frames queued and the two a resync adds around it
   * (resync.begin, stream.end), so with fewer no resync could ever start.
   */
  SEND_QUEUE_FRAMES: ms(20_000).pipe(z.number().min(3, 'must be at least 3 (a resync.begin, one deployment and a stream.end)')),
  SEND_QUEUE_BYTES: ms(32 << 20),
  /** Most frames one ingest statement carries. */
  INGEST_BATCH_FRAMES: ms(2_000),
  /**
   * How long a statement waits for more frames when fewer than a batch wait and none is in
   * flight (from its oldest frame's arrival); 0: at once. Adds at most this to an ack's latency.
   */
  INGEST_LINGER_MS: z.coerce.number().int().min(0).max(1_000, 'must be at most 1000: an ack later than that is no longer a batch latency').default(0),
  /** Rows fetched per desired-state query. */
  DESIRED_PAGE_ROWS: ms(1_000),
  /**
   * Bytes (of frames, roughly) per desired-state query, besides its rows: a page crosses the
   * gateway's RPC (32 MiB at most) and must fit the send queue's free bytes. A page always
   * carries at least one deployment. With the largest frame and the queue's reserve, at most
   * DESIRED_PAGE_RPC_BUDGET_BYTES.
   */
  DESIRED_PAGE_BYTES: ms(4 << 20),
  /**
   * The gateway that runs a fresh session's claim reads the first page of its resync snapshot
   * with it, up to this many deployments (also bounded by DESIRED_PAGE_ROWS and the send queue);
   * 0: none, and the session fetches its resync after the welcome, page by page.
   */
  CLAIM_SNAPSHOT_ROWS: z.coerce.number().int().nonnegative().default(100),
  /**
   * …and up to about this many bytes: the page rides back with the claim's answer. Needs no
   * bound of its own: the claim's page is also held to a desired page's (claimPageBytes).
   */
  CLAIM_SNAPSHOT_BYTES: z.coerce.number().int().nonnegative().default(1 << 20),
  /** Also the connection's statement_timeout, so at most what Postgres takes for it. */
  PG_QUERY_TIMEOUT_MS: ms(10_000).pipe(pgInt('statement_timeout')),
  /** A session's ingest statement waits this long for a row lock (at most half PG_QUERY_TIMEOUT_MS). */
  PG_LOCK_TIMEOUT_MS: ms(2_000),
  /** Shared Postgres connections (gateway objects) for lookups, claims, polls and the admin API. */
  DB_GATEWAY_SHARDS: ms(4),
  /** Postgres connections each gateway shard may open: a statement waiting on a lock holds only one. */
  DB_GATEWAY_CONNECTIONS: ms(3),
  PG_IDLE_CLOSE_MS: ms(3_000),
  /** More than CONTENTION_THRESHOLD displacements of one cluster within this window is contention. */
  CONTENTION_WINDOW_MS: retention(10 * 60_000),
  CONTENTION_THRESHOLD: ms(3).pipe(pgInt('the threshold the claim compares with')),
  /** A contention episode is over (and leaves the cluster view) after this long without a displacement. */
  CONTENTION_QUIET_MS: retention(10 * 60_000),
  /** The region this deployment serves (a wrangler environment); unset on the default deployment. */
  HUB_REGION: optional(z.string().regex(REGION_NAME_RE, 'lowercase letters, digits and -, at most 32 characters')),
  /** The Durable Object jurisdiction every object of this deployment is created in. */
  HUB_JURISDICTION: optional(z.enum(JURISDICTIONS)),
  /** Where the gateway objects are created (near this region's database); unset: near the first request. */
  DB_GATEWAY_LOCATION_HINT: optional(z.enum(LOCATION_HINTS)),
  /** Local development only: emulate HUB_JURISDICTION where the runtime has no jurisdictions (see region.ts). */
  HUB_JURISDICTION_EMULATION: flag,
}).superRefine((c, ctx) => {
  // The region is what operators and the admin API see; a jurisdiction without one would be
  // residency nobody can tell from the outside.
  if (c.HUB_JURISDICTION && !c.HUB_REGION) {
    ctx.addIssue({ code: 'custom', path: ['HUB_JURISDICTION'], message: 'needs HUB_REGION (the region that keeps its objects there)' });
  }
  // Smaller, and one large frame could never be queued: the session would close 4429 on every resume.
  if (c.SEND_QUEUE_BYTES < minSendQueueBytes(c)) {
    ctx.addIssue({ code: 'custom', path: ['SEND_QUEUE_BYTES'], message: `must be at least ${minSendQueueBytes(c)} (two of the largest frames, MAX_FRAME_BYTES)` });
  }
  const [pingMin, pingMax] = PING_INTERVAL_BOUNDS_MS;
  if (c.PING_INTERVAL_MS < pingMin || c.PING_INTERVAL_MS > pingMax) {
    ctx.addIssue({ code: 'custom', path: ['PING_INTERVAL_MS'], message: `must be ${pingMin}–${pingMax} (operators ignore a cadence outside it and ping every 10 s)` });
  } else if (c.IDLE_TIMEOUT_MS < 2 * c.PING_INTERVAL_MS) {
    ctx.addIssue({
      code: 'custom',
      path: ['IDLE_TIMEOUT_MS'],
      message: `must be at least twice PING_INTERVAL_MS, ${2 * c.PING_INTERVAL_MS} (an idle operator is heard only by its pings, and operators ignore a shorter limit: the hub would cut idle, healthy sessions)`,
    });
  } else if (c.IDLE_TIMEOUT_MS > IDLE_TIMEOUT_MAX_MS) {
    ctx.addIssue({
      code: 'custom',
      path: ['IDLE_TIMEOUT_MS'],
      message: `must be at most ${IDLE_TIMEOUT_MAX_MS} (the spec's silence limit; operators ignore a longer one and use 30 s)`,
    });
  }
  const pageRpcBytes = c.DESIRED_PAGE_BYTES + Math.min(c.MAX_FRAME_BYTES, REPLAY_ROW_MAX_BYTES) + QUEUE_RESERVE_BYTES;
  if (pageRpcBytes > DESIRED_PAGE_RPC_BUDGET_BYTES) {
    ctx.addIssue({
      code: 'custom',
      path: ['DESIRED_PAGE_BYTES'],
      message: `must be at most ${DESIRED_PAGE_RPC_BUDGET_BYTES - (pageRpcBytes - c.DESIRED_PAGE_BYTES)} with this MAX_FRAME_BYTES (a page, one frame more and 64 KiB must stay within ${DESIRED_PAGE_RPC_BUDGET_BYTES} bytes: the gateway's RPC refuses over 32 MiB)`,
    });
  }
  // The rule the admin API applies to a cluster's hint: the gateway shards live in the jurisdiction too.
  const outside = c.DB_GATEWAY_LOCATION_HINT ? hintOutsideJurisdiction(c.DB_GATEWAY_LOCATION_HINT, c.HUB_JURISDICTION) : null;
  if (outside) ctx.addIssue({ code: 'custom', path: ['DB_GATEWAY_LOCATION_HINT'], message: outside });
  // Postgres reads "connected" back from now by this much (connected-sql.ts): further than it
  // can compute, every cluster list and fleet page failed (22008, answered as the request's fault).
  const stale = connectedStaleAfterMs(c);
  if (stale > HISTORY_RETENTION_MAX_MS) {
    const field = c.LIVE_SWEEP_MS * 3 >= c.POLL_INTERVAL_MS * 2 ? 'LIVE_SWEEP_MS' : 'POLL_INTERVAL_MS';
    ctx.addIssue({
      code: 'custom',
      path: [field],
      message: `makes the "connected" horizon (3 × LIVE_SWEEP_MS + 2 × POLL_INTERVAL_MS = ${stale}) longer than ${HISTORY_RETENTION_MAX_MS} (100 years): Postgres cannot reach a horizon much further back`,
    });
  }
});

export type HubConfig = z.infer<typeof ConfigSchema>;

/** Every setting's name, set or not (optional ones are absent from a parsed config). */
export const HUB_CONFIG_NAMES: readonly string[] = Object.keys(ConfigSchema.shape);

let cached: { source: object; config: HubConfig } | null = null;

/** A var out of its bounds: a deployment error, never an outage (nothing mends it but a new value). */
export class HubConfigError extends Error {
  constructor(readonly variable: string, detail: string) {
    super(`invalid hub configuration ${variable}: ${detail}`);
    this.name = 'HubConfigError';
  }
}

/**
 * The database secret is set. Not part of the parsed vars (`npm start` and check:deploy parse
 * those without it): unset or blank, the driver would dial its default host, and every request
 * that needs the registry would report a database outage to wait out rather than a missing secret.
 */
export function checkDatabaseUrl(env: { DATABASE_URL?: unknown }): void {
  if (typeof env.DATABASE_URL !== 'string' || env.DATABASE_URL.trim() === '') {
    throw new HubConfigError('DATABASE_URL', 'not set: a secret of each deployment, its own database (wrangler secret put DATABASE_URL [--env <region>])');
  }
}

/** Parse once per env object; a bad value is a deployment error and fails loudly. */
export function hubConfig(env: object): HubConfig {
  if (cached?.source === env) return cached.config;
  const parsed = ConfigSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new HubConfigError(issue?.path.join('.') ?? '', issue?.message ?? 'invalid');
  }
  cached = { source: env, config: parsed.data };
  return parsed.data;
}

/**
 * How long a session's "connected" in Postgres stays believable without news from it. A session
 * writes it at its claim and at every check; an idle one is swept between one and two sweep
 * periods after its last check-in (an offset of its own) and its answer is recorded a poll later,
 * so a session silent for three sweeps ended without saying so.
 */
export function connectedStaleAfterMs(cfg: HubConfig): number {
  return cfg.LIVE_SWEEP_MS * 3 + cfg.POLL_INTERVAL_MS * 2;
}

