import type { SessionSql } from './schema';

/**
 * How often this object is woken, kept in its own SQLite so it survives the evictions it is
 * meant to show. A wake is any event the runtime delivers (a frame, a close, an alarm, an RPC);
 * measuring RPCs (`status`, `wakeStats`) are not counted. `constructions` counts the times the
 * object was brought into memory; `recent` keeps the last wake times, so a benchmark can tell
 * when the object was idle long enough to be evicted.
 *
 * Written a second after the first uncounted wake, not at every wake: an object is evicted only
 * about ten seconds after its last event, so nothing is lost to an eviction, and a burst of
 * wakes (frames, desired pokes) costs one write. Sooner when the object writes its alarm anyway
 * (`flushPending`): then the counts join that commit instead of making one of their own.
 *
 * Written only beside a session's own storage: an object that holds no session (one never
 * opened, one whose storage retention deleted) keeps its counts in memory. Every fresh session is
 * a new object, so a row written there would outlive the session for good, with no alarm left to
 * delete it.
 */
export interface WakeStats {
  wakes: number;
  constructions: number;
  byKind: Record<string, number>;
  /** Epoch ms of the most recent wakes, oldest first (at most RECENT_KEEP). */
  recent: number[];
}

const RECENT_KEEP = 256;
const FLUSH_AFTER_MS = 1_000;

export class WakeCounter {
  private stats: WakeStats | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly sql: SessionSql) {
    this.load().constructions++;
    this.schedule();
  }

  note(kind: string, now = Date.now()): void {
    const s = this.load();
    s.wakes++;
    s.byKind[kind] = (s.byKind[kind] ?? 0) + 1;
    s.recent.push(now);
    // Trimmed in bulk: a frame is a wake, and shifting the whole list on every frame showed in
    // an ingest profile (3% of the isolate's time).
    if (s.recent.length >= 2 * RECENT_KEEP) trimRecent(s);
    this.schedule();
  }

  snapshot(): WakeStats {
    this.flush();
    const s = this.load();
    return { ...s, byKind: { ...s.byKind }, recent: [...s.recent] };
  }

  /** Write now what is waiting for the timer: the caller is writing anyway, so it joins that commit. */
  flushPending(): void {
    if (this.timer) this.flush();
  }

  /** After the object's storage is deleted: nothing is written until a session writes again. */
  reinit(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private load(): WakeStats {
    if (this.stats) return this.stats;
    const row = this.sql.fresh ? undefined : this.sql.exec<{ doc: string }>('select doc from wakes where k = 1').toArray()[0];
    this.stats = row ? (JSON.parse(row.doc) as WakeStats) : { wakes: 0, constructions: 0, byKind: {}, recent: [] };
    return this.stats;
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => this.flush(), FLUSH_AFTER_MS);
  }

  private flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (!this.stats || this.sql.fresh) return;
    trimRecent(this.stats);
    this.sql.exec('insert into wakes (k, doc) values (1, ?) on conflict (k) do update set doc = excluded.doc', JSON.stringify(this.stats));
  }
}

function trimRecent(s: WakeStats): void {
  if (s.recent.length > RECENT_KEEP) s.recent.splice(0, s.recent.length - RECENT_KEEP);
}
