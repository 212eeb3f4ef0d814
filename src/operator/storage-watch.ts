/**
 * Local storage calls that do not complete: a hung volume (NFS, a detached block device) fails
 * nothing, it only never answers. Both durable writes hold the link while they wait: a save of the
 * record holds every save behind it (they are single-flight), and with them every ack and
 * operation start; a sync of the outbound log holds the write batch, so nothing is sent at all.
 * The hub's window fills, it stops sending, and the cluster is no longer managed while nothing
 * says why. The SDK cannot give up on a write that may still land, so it reports it, as it reports
 * a held handler: an error line and the `saveStalled` event at the stall limit and as the wait
 * doubles, and a line when the call ends. The record's load at start is watched the same way: a
 * start that hangs on it would otherwise say nothing at all.
 */
import type { LogFields, Logger } from './logger';
import { elapsed, type Timers } from './timers';

/** Repeated reports of one held call come at most this far apart (as a held handler's do). */
const REPORT_CAP_MS = 5 * 60_000;

export type HeldStorage = 'record' | 'record-load' | 'outbound-log';

const HELD: Record<HeldStorage, { held: string; ended: string }> = {
  record: {
    held: 'a save of the durable state has not completed: no ack is sent and no operation starts until it does',
    ended: 'the held save of the durable state ended',
  },
  'record-load': {
    held: 'loading the durable state at start has not completed: the client cannot start until it does',
    ended: 'the held load of the durable state ended',
  },
  'outbound-log': {
    held: 'a sync of the outbound log has not completed: nothing is sent to the hub until it does',
    ended: 'the held sync of the outbound log ended',
  },
};

export interface StorageWatch {
  timers: Timers;
  /** A call not completed after this long is reported, and again each time the wait doubles. */
  stallMs: number;
  stalled(info: { what: HeldStorage; heldMs: number }): void;
  /** The session's logger (its lines name cluster and session). */
  log(): Logger;
}

/** Watch one call from now; the returned function is called when it ends, however it ends. */
export function watchStorage(w: StorageWatch | null, what: HeldStorage, fields: LogFields = {}): () => void {
  if (!w) return () => {};
  const log = w.log();
  // A duration: on the monotonic clock, so a wall-clock step neither hides nor fakes a stall.
  const started = elapsed(w.timers);
  let reports = 0;
  const report = (): void => {
    const heldMs = elapsed(w.timers) - started;
    reports++;
    log.error(HELD[what].held, { ...fields, held_ms: heldMs });
    w.stalled({ what, heldMs });
    cancel = w.timers.schedule(report, Math.min(Math.max(heldMs, w.stallMs), REPORT_CAP_MS));
  };
  let cancel = w.timers.schedule(report, w.stallMs);
  return () => {
    cancel();
    if (reports > 0) log.warn(HELD[what].ended, { ...fields, held_ms: elapsed(w.timers) - started });
  };
}
