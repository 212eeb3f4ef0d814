/**
 * Keeping the durable record (cursor-store.ts) in step with the client: change tracking and a
 * single-flight save. "Ack means durably processed": the client saves before it writes any frame
 * carrying a new cursor, and `persistedCursor` is the cursor the last completed save holds, the
 * only one it may send as `ack`.
 */
import { CorruptCursorStoreError, emptyRecord, FileCursorStore, type CursorStore, type DurableRecord } from './cursor-store';
import type { Logger } from './logger';
import { watchStorage, type StorageWatch } from './storage-watch';

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
  /** The stop's final save is done: nothing is written after it. */
  private sealedFlag = false;

  constructor(
    private readonly store: CursorStore,
    private readonly log: Logger,
    /** The record as of now. */
    private readonly build: (clean: boolean) => DurableRecord,
    /** Told of every failed save, before its callers are (the client stops on a lost state directory). */
    private readonly failed: (err: unknown) => void = () => {},
    private readonly watch: StorageWatch | null = null,
  ) {}

  /** The saved record; an unreadable one is set aside and a new operator starts (slower, never wrong). */
  async load(): Promise<DurableRecord> {
    const unwatch = watchStorage(this.watch, 'record-load');
    try {
      return (await this.store.load()) ?? emptyRecord();
    } catch (err) {
      if (!(err instanceof CorruptCursorStoreError)) throw err;
      const aside = this.store instanceof FileCursorStore ? await this.store.quarantine() : null;
      this.log.error('cursor store unreadable: starting as a new session', { err, moved_to: aside });
      return emptyRecord();
    } finally {
      unwatch();
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
   * many starts keep arriving behind it (group commit, see receiver.ts). After the stop's final
   * save (`finalSave`) it writes nothing and resolves at once: the process is stopping, and a
   * change it did not save is the next process's to redo, as after a crash.
   */
  persist(): Promise<void> {
    if (this.sealedFlag) return Promise.resolve();
    if (this.next) return this.next;
    if (!this.persisting) return this.saveNow();
    // The save under way was built before this call: it may miss what the caller changed.
    const next = this.persisting
      .catch(() => {})
      .then(() => {
        this.next = null;
        // Never past the seal (finalSave waits for every queued save, so only as a last guard).
        return this.sealedFlag ? undefined : this.saveNow();
      });
    this.next = next;
    return next;
  }

  /** The stop's final save is done: the state directory may belong to the next process. */
  get sealed(): boolean {
    return this.sealedFlag;
  }

  /**
   * The stop's save, the last one. A save asked for while it is written (a handler concluding
   * during a stop that does not wait for it) is written before this resolves, not after: the
   * caller gives the state directory's lock up next, and a write after that could replace the
   * record of a process that took the directory over. From then on persist() writes nothing.
   * Also when a save fails: the saves queued behind it are still written, and waited for, before
   * this settles; it rejects when the last one written failed (each is built when it starts, so
   * the last holds everything).
   */
  async finalSave(): Promise<void> {
    let failure: { err: unknown } | null = null;
    const settle = async (save: Promise<void>) => {
      try {
        await save;
        failure = null;
      } catch (err) {
        failure = { err };
      }
    };
    try {
      await settle(this.persist());
      // A save queued behind the one awaited is either still queued or already started.
      for (let p = this.next ?? this.persisting; p; p = this.next ?? this.persisting) await settle(p);
    } finally {
      this.sealedFlag = true;
    }
    if (failure) throw (failure as { err: unknown }).err;
  }

  private saveNow(): Promise<void> {
    const run = async () => {
      let unwatch = () => {};
      try {
        const version = this.changeVersion;
        const numbering = this.numbering;
        const record = this.build(this.cleanOnSave);
        unwatch = watchStorage(this.watch, 'record', { cursor: record.cursor });
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
}
