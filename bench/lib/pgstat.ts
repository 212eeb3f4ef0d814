/** Postgres activity during a scenario: backends (for the bench database and server-wide), transactions. */
import type { Client } from '@neondatabase/serverless';
import { pgClient } from '../../scripts/lib/pg-node';
import type { BenchEnv } from './env';

export class PgActivitySampler {
  private client: Client | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private busy = false;
  peak = 0;
  peakServer = 0;

  constructor(
    private readonly env: BenchEnv,
    private readonly everyMs = 200,
  ) {}

  async start(): Promise<void> {
    this.client = await this.env.newClient();
    this.peak = 0;
    this.peakServer = 0;
    this.timer = setInterval(() => void this.sample(), this.everyMs);
  }

  private async sample(): Promise<void> {
    if (this.busy || !this.client) return;
    this.busy = true;
    try {
      const { rows } = await this.client.query<{ db: string; total: string }>(
        `select count(*) filter (where datname = current_database()) as db, count(*) filter (where backend_type = 'client backend') as total from pg_stat_activity`,
      );
      const r = rows[0];
      // Minus this sampler's own connection.
      if (r) {
        this.peak = Math.max(this.peak, Number(r.db) - 1);
        this.peakServer = Math.max(this.peakServer, Number(r.total) - 1);
      }
    } catch {
      // too many clients, or shutting down: skip this sample
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<{ peak: number; peakServer: number }> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.client?.end().catch(() => undefined);
    this.client = null;
    return { peak: this.peak, peakServer: this.peakServer };
  }
}

/**
 * Transactions and new connections of the bench database over time (pg_stat_database), sampled
 * from a connection to the server's maintenance database so the sampling itself is not counted.
 * Postgres publishes a backend's counts when it goes idle (at most once a second, within 10 s):
 * fine for rates over minutes, approximate for a single interval.
 */
export class PgXactSampler {
  private client: Client | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private busy = false;
  private samples: { t: number; xacts: number; sessions: number }[] = [];

  constructor(
    private readonly env: BenchEnv,
    private readonly everyMs = 5_000,
  ) {}

  async start(): Promise<void> {
    const url = new URL(this.env.stack.databaseUrl);
    this.dbName = decodeURIComponent(url.pathname.slice(1));
    url.pathname = '/postgres';
    this.client = pgClient(url.toString(), this.env.stack.pgWsProxy);
    this.client.on('error', () => undefined);
    await this.client.connect();
    this.samples = [];
    await this.sample();
    this.timer = setInterval(() => void this.sample(), this.everyMs);
  }

  private dbName = '';

  private async sample(): Promise<void> {
    if (this.busy || !this.client) return;
    this.busy = true;
    try {
      const { rows } = await this.client.query<{ x: string; s: string }>(
        'select xact_commit + xact_rollback as x, sessions as s from pg_stat_database where datname = $1',
        [this.dbName],
      );
      const r = rows[0];
      if (r) this.samples.push({ t: performance.now(), xacts: Number(r.x), sessions: Number(r.s) });
    } catch {
      // skip this sample
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<{ perSecond: number; medianPerSecond: number; peakPerSecond: number; connectionsPerSecond: number }> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    while (this.busy) await new Promise((r) => setTimeout(r, 10));
    await this.sample();
    await this.client?.end().catch(() => undefined);
    this.client = null;
    const s = this.samples;
    const first = s[0];
    const last = s[s.length - 1];
    if (!first || !last || last.t <= first.t) return { perSecond: Number.NaN, medianPerSecond: Number.NaN, peakPerSecond: Number.NaN, connectionsPerSecond: Number.NaN };
    const span = (last.t - first.t) / 1000;
    const rates = s.slice(1).map((x, i) => (x.xacts - (s[i] as typeof x).xacts) / ((x.t - (s[i] as typeof x).t) / 1000));
    const sorted = [...rates].sort((a, b) => a - b);
    return {
      perSecond: (last.xacts - first.xacts) / span,
      medianPerSecond: sorted.length ? (sorted[Math.floor((sorted.length - 1) / 2)] as number) : Number.NaN,
      peakPerSecond: sorted.length ? (sorted[sorted.length - 1] as number) : Number.NaN,
      connectionsPerSecond: (last.sessions - first.sessions) / span,
    };
  }
}

/**
 * What the bench database's active backends wait on, sampled every `everyMs` from a connection
 * to the maintenance database: counts by `wait_event_type: wait_event` (`CPU` when none).
 */
export class PgWaitSampler {
  private client: Client | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private busy = false;
  private dbName = '';
  private counts = new Map<string, number>();
  samples = 0;

  constructor(
    private readonly env: BenchEnv,
    private readonly everyMs = 20,
  ) {}

  async start(): Promise<void> {
    const url = new URL(this.env.stack.databaseUrl);
    this.dbName = decodeURIComponent(url.pathname.slice(1));
    url.pathname = '/postgres';
    this.client = pgClient(url.toString(), this.env.stack.pgWsProxy);
    this.client.on('error', () => undefined);
    await this.client.connect();
    this.counts.clear();
    this.samples = 0;
    this.timer = setInterval(() => void this.sample(), this.everyMs);
  }

  private async sample(): Promise<void> {
    if (this.busy || !this.client) return;
    this.busy = true;
    try {
      const { rows } = await this.client.query<{ w: string; n: string }>(
        `select coalesce(wait_event_type || ': ' || wait_event, 'CPU') as w, count(*) as n from pg_stat_activity
         where datname = $1 and state = 'active' and backend_type = 'client backend' group by 1`,
        [this.dbName],
      );
      this.samples++;
      for (const r of rows) this.counts.set(r.w, (this.counts.get(r.w) ?? 0) + Number(r.n));
    } catch {
      // skip this sample
    } finally {
      this.busy = false;
    }
  }

  /** Average number of active backends in each state per sample, most first. */
  async stop(): Promise<{ samples: number; byWait: { wait: string; avg: number }[] }> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    while (this.busy) await new Promise((r) => setTimeout(r, 5));
    await this.client?.end().catch(() => undefined);
    this.client = null;
    const n = Math.max(1, this.samples);
    return {
      samples: this.samples,
      byWait: [...this.counts.entries()].map(([wait, c]) => ({ wait, avg: c / n })).sort((a, b) => b.avg - a.avg),
    };
  }
}
