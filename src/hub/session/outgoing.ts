import { jsonUtf8Length, type MessageType, type Payload } from '../../protocol';

/**
 * One frame waiting in the hub's send queue. Not numbered yet: sequence numbers are assigned
 * when it is written. The effects run when it is numbered, so that what the session persists
 * (watermark, resync progress) only ever describes frames that are in the replay buffer.
 */
export type Outgoing =
  | {
      kind: 'frame';
      type: MessageType;
      /** Computed at write time for frames whose content depends on what was written before (stream.end's count). */
      payload: () => Payload<MessageType>;
      replyTo: string | null;
      id?: string;
      /** The desired revision this frame carries. */
      revision?: number;
      effect?: Effect;
      /** `estimateBytes`, when it was already taken (a poke's changes are measured before queuing). */
      bytes?: number;
      /** The seq of the operator frame this error answers (an answer is owed, send-path.ts `owe`). */
      answers?: number;
    }
  /** No frame: only an effect to apply once everything queued before it has been written. */
  | { kind: 'marker'; effect: Effect };

export type Effect =
  | { t: 'resync_begin' }
  | { t: 'resync_item'; deploymentId: string; revision: number }
  | { t: 'resync_end' }
  | { t: 'resync_op'; revision: number }
  | { t: 'resync_done' }
  | { t: 'watermark'; revision: number };

/**
 * The frame's size in UTF-8, its payload counted exactly and its envelope at the most it takes
 * (256 bytes: ids, seq, ack, reply_to, ts), without serializing it: the queue's byte bound and
 * the replay window (send-path.ts) are judged by it before the frame is written.
 */
export function estimateBytes(o: Outgoing): number {
  if (o.kind === 'marker') return 0;
  return (o.bytes ??= 256 + jsonUtf8Length(o.payload()));
}
