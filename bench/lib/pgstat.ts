/** Samples how many Postgres backends exist (for the bench database and server-wide) during a scenario. */
import type { Client } from '@neondatabase/serverless';
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
