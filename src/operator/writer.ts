/**
 * The write pump: it numbers what the hub's window allows, makes the batch and the cursor durable
 * (one fsync of the outbound log and one save of the record, in parallel), then writes it all, and
 * sends an `ack` frame when the cursor moved and nothing else carried it within `ackDelayMs`.
 * A burst of requests coalesces into one batch. The decisions about one frame are pure (`admit`,
 * `windowOpen`); the rest talks to the client through `WriterHost`.
 */
import { buildFrame, CloseCode, utf8Length, type OutboundSequencer } from '../protocol';
import type { ClientStats, Limits } from './client-types';
import type { Link } from './link';
import { watchStorage, type StorageWatch } from './storage-watch';
import type { Logger } from './logger';
import type { OutboundLog } from './outbound-log';
import { fitted, type OutItem } from './outgoing';
import type { Outbox } from './outbox';
import type { Timers } from './timers';

/** Whether the hub's window has room for another numbered frame. */
export function windowOpen(limits: Limits, unacked: number, bufferedBytes: number): boolean {
  return unacked < limits.replay_buffer_frames && bufferedBytes < limits.replay_buffer_bytes;
}

export type Admission = 'write' | 'too-big' | 'wait';

/**
 * One frame of `bytes`: larger than the hub accepts (never sent), too large for what is left of
 * the window's bytes (wait for acks; a frame alone in an empty window always goes), or written.
 */
export function admit(bytes: number, limits: Limits, unacked: number, bufferedBytes: number): Admission {
  if (bytes > limits.max_frame_bytes) return 'too-big';
  if (unacked > 0 && bufferedBytes + bytes > limits.replay_buffer_bytes) return 'wait';
  return 'write';
}

export interface Written {
  item: OutItem;
  seq: number;
}

export interface WriterHost {
  readonly timers: Timers;
  readonly log: Logger;
  readonly counters: ClientStats;
  readonly outbox: Outbox;
  readonly buffer: OutboundLog;
  readonly ackDelayMs: number;
  outbound(): OutboundSequencer;
  /** The cursor of the hub's stream that may be saved and acked (may be ahead of the saved one). */
  cursor(): number;
  /** The cursor the last completed save holds: the only one that may go out as `ack`. */
  durableCursor(): number;
  limits(): Limits;
  link(): Link | null;
  stopping(): boolean;
  needsSave(): boolean;
  persist(): Promise<void>;
  /** A batch could not be made durable, so none of it was written; `numbered`: it held sequenced frames. */
  storageFailed(numbered: boolean, err: unknown): void;
  closeLink(link: Link, code: number, reason: string): void;
  /** Frames that can no longer die with the process: in the synced log, or never to be sent. */
  settledAnswers(items: OutItem[]): void;
  /** Frames of a batch reached the socket. */
  wrote(written: Written[]): void;
  /** The pump went idle (a graceful stop may be drained). */
  idle(): void;
  /** Reports a sync of the log that does not complete (storage-watch.ts). */
  readonly storageWatch?: StorageWatch;
}

export class Writer {
  private requested = false;
  private scheduled = false;
  private pumping = false;
  private ackDue = false;
  private cancelAck: (() => void) | null = null;

  constructor(private readonly host: WriterHost) {}

  /** Coalesce a burst of requests into one write batch (one fsync, one save). */
  request(): void {
    this.requested = true;
    if (this.pumping || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.loop();
    });
  }

  /** The cursor moved: an `ack` goes out after `ackDelayMs` unless a frame carries it first (at once while stopping). */
  cursorAdvanced(): void {
    if (this.host.stopping()) {
      // Draining: the hub must learn the final cursor now, not after a delay.
      this.ackDue = true;
      this.request();
      return;
    }
    if (this.cancelAck) return;
    this.cancelAck = this.host.timers.schedule(() => {
      this.cancelAck = null;
      this.ackDue = true;
      this.request();
    }, this.host.ackDelayMs);
  }

  /** A stop begins: an ack still waiting for its delay goes out now. */
  ackNow(lastAckSent: number): void {
    if (this.host.cursor() <= lastAckSent) return;
    this.cancelAck?.();
    this.cancelAck = null;
    this.cursorAdvanced();
  }

  /** The link closed (or the client stops): nothing is due on a link that is gone. */
  reset(): void {
    this.cancelAck?.();
    this.cancelAck = null;
    this.ackDue = false;
  }

  private async loop(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.requested) {
        this.requested = false;
        await this.once();
      }
    } catch (err) {
      this.host.log.error('writer failed', { err });
    } finally {
      this.pumping = false;
      this.host.idle();
    }
  }

  private write(link: Link, text: string): void {
    if (link.write(text)) this.host.counters.framesOut++;
  }

  /** One write batch. */
  private async once(): Promise<void> {
    const h = this.host;
    const link = h.link();
    if (!link || !link.open) return;
    const outbound = h.outbound();
    const limits = h.limits();
    const texts: string[] = [];
    const written: Written[] = [];
    if (link.replay) {
      for (const e of link.replay) texts.push(e.frame);
      link.replay = null;
    }
    const ack = h.cursor();
    while (windowOpen(limits, outbound.unacked, outbound.store.bytes)) {
      const item = h.outbox.next();
      if (!item) break;
      const seq = outbound.nextSeq;
      const build = (it: OutItem): string =>
        buildFrame({
          type: it.type,
          payload: it.payload as never,
          seq,
          ack,
          reply_to: it.replyTo,
          ...(it.id !== undefined ? { id: it.id } : {}),
          now: h.timers.now(),
        });
      let text = build(item);
      let bytes = utf8Length(text);
      if (bytes > limits.max_frame_bytes) {
        // An answer or a conclusion over the hub's limit goes with its text cut, not at all.
        const smaller = fitted(item, bytes - limits.max_frame_bytes);
        if (smaller) {
          h.log.warn('frame larger than the hub accepts: its text cut to fit', { type: item.type, bytes, max: limits.max_frame_bytes });
          text = build(smaller);
          bytes = utf8Length(text);
        }
      }
      const verdict = admit(bytes, limits, outbound.unacked, outbound.store.bytes);
      if (verdict === 'too-big') {
        h.counters.oversizeFrames++;
        h.log.error('frame larger than the hub accepts: not sent', { type: item.type, bytes, max: limits.max_frame_bytes });
        h.outbox.skipped(item, `frame of ${bytes} bytes exceeds max_frame_bytes`);
        h.settledAnswers([item]);
        continue;
      }
      if (verdict === 'wait') {
        h.outbox.putBack(item);
        break;
      }
      outbound.stamp(() => text);
      // What waits on the numbering learns it now, before any await: an operation's conclusion is
      // tracked by its seq from here (delivered when acked, sent again when a fresh session drops
      // the buffer). Told later, a fresh session granted meanwhile would already have cleared what
      // it tracks, and the seq of the old numbering would be read against the new one's acks.
      item.onWritten?.(seq);
      h.outbox.wrote(item);
      texts.push(text);
      written.push({ item, seq });
    }

    try {
      // The record first, then the log: a frame the log keeps (and replays verbatim after a
      // crash) carries an ack, an acceptance or a conclusion, and none of them may be durable in
      // the log while the record that says so is not (a replay would ack a cursor the restarted
      // process rewinds below, or conclude an operation its record still calls running).
      if (h.needsSave()) await h.persist();
      if (texts.length > 0) {
        const unwatch = watchStorage(h.storageWatch ?? null, 'outbound-log', { frames: texts.length });
        try {
          await h.buffer.sync();
        } finally {
          unwatch();
        }
      }
    } catch (err) {
      // Nothing of this batch reached the socket. A log that failed to sync cannot vouch for
      // itself any more, so the next hello says lossy.
      h.log.error('could not make the batch durable: nothing written, reconnecting', { err });
      h.storageFailed(written.length > 0, err);
      if (h.link() === link) h.closeLink(link, CloseCode.INTERNAL, 'local storage failure');
      return;
    }
    // The log keeps these now (a resume replays them), whatever becomes of the link.
    h.settledAnswers(written.map((w) => w.item));
    // Numbered frames wait in the buffer for the resume (their seq was told when numbered).
    if (h.link() !== link || !link.open) return;

    for (const t of texts) this.write(link, t);
    if (texts.length > 0) link.wroteSequenced();
    h.wrote(written);
    if (written.length > 0) link.lastAckSent = Math.max(link.lastAckSent, ack);
    if (this.ackDue) {
      this.ackDue = false;
      const durable = h.durableCursor();
      if (durable > link.lastAckSent) {
        this.write(link, buildFrame({ type: 'ack', payload: {}, ack: durable, now: h.timers.now() }));
        link.lastAckSent = durable;
      }
    }
    if (h.cursor() > link.lastAckSent) this.cursorAdvanced();
    if (written.length > 0 && !h.outbox.empty && windowOpen(limits, outbound.unacked, outbound.store.bytes)) this.requested = true;
  }
}
