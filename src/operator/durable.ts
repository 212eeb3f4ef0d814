/**
 * Keeping the durable record (cursor-store.ts) in step with the client: change tracking and a
 * single-flight save. "Ack means durably processed": the client saves before it writes any frame
 * carrying a new cursor, and `persistedCursor` is the cursor the last completed save holds, the
 * only one it may send as `ack`.
 */
import { CorruptCursorStoreError, emptyRecord, FileCursorStore, type CursorStore, type DurableRecord } from './cursor-store';
import type { Logger } from './logger';
import { elapsed, type Timers } from './timers';

/** Repeated reports of one held save come at most this far apart (as a held handler's do). */
const SAVE_STALL_REPORT_CAP_MS = 5 * 60_000;

/** Watching saves that do not complete (a hung disk or network volume). */
export interface SaveWatch {
  timers: Timers;
  /** A save not completed after this long is reported, and again each time the wait doubles. */
  stallMs: number;
  stalled(info: { heldMs: number; cursor: number }): void;
  /** The session's logger (its lines name cluster and session). */
  log(): Logger;
}

export class RecordKeeper {
  /** The cursor in the last completed save. */
  persistedCursor = 0;
  /** The next save says `clean` (only a graceful stop that left nothing over sets it). */
  cleanOnSave = false;
  private changeVersion = 0;
  private savedVersion = 0;
  /** The save being written. */
  private persisting: Promise<void> | null = null;
  /** The save after it, which every caller during the one being written shares. */
  private next: Promise<void> | null = null;
  /** Bumped when a fresh session restarts the cursor: a save built before it holds another session's. */
  private numbering = 0;

  constructor(
    private readonly store: CursorStore,
    private readonly log: Logger,
    /** The record as of now. */
    private readonly build: (clean: boolean) => DurableRecord,
    /** Told of every failed save, before its callers are (the client stops on a lost state directory). */
    private readonly failed: (err: unknown) => void = () => {},
    private readonly watch: SaveWatch | null = null,
  ) {}

  /** The saved record; an unreadable one is set aside and a new operator starts (slower, never wrong). */
  async load(): Promise<DurableRecord> {
    try {
      return (await this.store.load()) ?? emptyRecord();
    } catch (err) {
      if (!(err instanceof CorruptCursorStoreError)) throw err;
      const aside = this.store instanceof FileCursorStore ? await this.store.quarantine() : null;
      this.log.error('cursor store unreadable: starting as a new session', { err, moved_to: aside });
      return emptyRecord();
    }
  }

  /**
   * A fresh session: its cursor starts at 0, and 0 is a true ack even before the save. A save of
   * the old session's record still under way must not make its cursor the durable one when it
   * completes: pings and acks of the new session would carry it.
   */
  freshCursor(): void {
    this.numbering++;
    this.persistedCursor = 0;
    this.markChanged();
  }

  /** Something in the record other than the cursor changed. */
  markChanged(): void {
    this.changeVersion++;
  }

  needsSave(cursor: number): boolean {
    return this.changeVersion !== this.savedVersion || cursor !== this.persistedCursor;
  }

  /**
   * Save the record; when the returned promise resolves, a record at least as new as the state
   * at the time of the call is durable. Saves are single-flight: callers during a save share the
   * next one (built when it starts, so it holds all they changed). Each resolves with its own
   * save, not with the last of a run of them: an operation start waits for one save, however
   * many starts keep arriving behind it (group commit, see receiver.ts).
   */
  persist(): Promise<void> {
    if (this.next) return this.next;
    if (!this.persisting) return this.saveNow();
    // The save under way was built before this call: it may miss what the caller changed.
    const next = this.persisting
      .catch(() => {})
      .then(() => {
        this.next = null;
        return this.saveNow();
      });
    this.next = next;
    return next;
  }

  private saveNow(): Promise<void> {
    const run = async () => {
      let unwatch = () => {};
      try {
        const version = this.changeVersion;
        const numbering = this.numbering;
        const record = this.build(this.cleanOnSave);
        unwatch = this.watchSave(record.cursor);
        await this.store.save(record);
        this.savedVersion = version;
        if (numbering === this.numbering) this.persistedCursor = record.cursor;
      } catch (err) {
        this.failed(err);
        throw err;
      } finally {
        unwatch();
        this.persisting = null;
      }
    };
    this.persisting = run();
    return this.persisting;
  }

  /**
   * A save that never completes (a hung volume: NFS, a detached block device) holds every save
   * behind it, since saves are single-flight, and with them every ack and every operation start:
   * the hub stops sending once its window is full and the cluster is no longer managed, while
   * nothing fails that would say why. It is reported as a held handler is: an error line and the
   * client's `saveStalled` event at the stall limit and as the wait doubles, and a line when the
   * save completes (or fails: the client then stops, as on any failed save).
   */
  private watchSave(cursor: number): () => void {
    const w = this.watch;
    if (!w) return () => {};
    const log = w.log();
    // A duration: on the monotonic clock, so a wall-clock step neither hides nor fakes a stall.
    const started = elapsed(w.timers);
    let reports = 0;
    const report = (): void => {
      const heldMs = elapsed(w.timers) - started;
      reports++;
      log.error('a save of the durable state has not completed: no ack is sent and no operation starts until it does', { held_ms: heldMs, cursor });
      w.stalled({ heldMs, cursor });
      cancel = w.timers.schedule(report, Math.min(Math.max(heldMs, w.stallMs), SAVE_STALL_REPORT_CAP_MS));
    };
    let cancel = w.timers.schedule(report, w.stallMs);
    return () => {
      cancel();
      if (reports > 0) log.warn('the held save of the durable state ended', { held_ms: elapsed(w.timers) - started, cursor });
    };
  }
}
