/**
 * How often this object is woken, kept in its own SQLite so it survives the evictions it is
 * meant to show. A wake is any event the runtime delivers (a frame, a close, an alarm, an RPC);
 * measuring RPCs (`status`, `wakeStats`) are not counted. `constructions` counts the times the
 * object was brought into memory; `recent` keeps the last wake times, so a benchmark can tell
 * when the object was idle long enough to be evicted.
 */
export interface WakeStats {
  wakes: number;
  constructions: number;
  byKind: Record<string, number>;
  /** Epoch ms of the most recent wakes, oldest first (at most RECENT_KEEP). */
  recent: number[];
}

const RECENT_KEEP = 256;
/** Frames arrive in bursts: their count is written at most this often (a floor after an eviction). */
const FRAME_FLUSH_MS = 1_000;

const SCHEMA = `create table if not exists wakes (k integer primary key check (k = 1), doc text not null)`;

export class WakeCounter {
  private stats: WakeStats;
  private dirtySince: number | null = null;

  constructor(private readonly sql: SqlStorage) {
    sql.exec(SCHEMA);
    const row = sql.exec<{ doc: string }>('select doc from wakes where k = 1').toArray()[0];
    this.stats = row ? (JSON.parse(row.doc) as WakeStats) : { wakes: 0, constructions: 0, byKind: {}, recent: [] };
    this.stats.constructions++;
    this.flush();
  }

  /** Count a wake; frames are written in bursts, everything else at once. */
  note(kind: string, now = Date.now()): void {
    const s = this.stats;
    s.wakes++;
    s.byKind[kind] = (s.byKind[kind] ?? 0) + 1;
    s.recent.push(now);
    if (s.recent.length > RECENT_KEEP) s.recent.splice(0, s.recent.length - RECENT_KEEP);
    if (kind !== 'message') return this.flush();
    if (this.dirtySince === null) this.dirtySince = now;
    else if (now - this.dirtySince >= FRAME_FLUSH_MS) this.flush();
  }

  snapshot(): WakeStats {
    this.flush();
    return { ...this.stats, byKind: { ...this.stats.byKind }, recent: [...this.stats.recent] };
  }

  /** After the object's storage is deleted. */
  reinit(): void {
    this.sql.exec(SCHEMA);
    this.flush();
  }

  private flush(): void {
    this.dirtySince = null;
    this.sql.exec('insert into wakes (k, doc) values (1, ?) on conflict (k) do update set doc = excluded.doc', JSON.stringify(this.stats));
  }
}
