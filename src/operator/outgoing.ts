import { CATALOG, coalescingKey, frameBytesBound, isKnownType, queueClassOf, utf8Length, type MessageType, type Payload, type QueueClass, type TypedMessage } from '../protocol';

/**
 * A frame waiting to be written. It has no seq yet: numbers are assigned when it is written, so
 * the send queue may replace and evict it freely.
 */
export interface OutItem {
  type: MessageType;
  payload: unknown;
  replyTo: string | null;
  /** Preassigned id (a resync.begin's id is known before it is written, its stream refers to it). */
  id?: string;
  /** Told the seq the frame got when the writer numbers it, whatever then becomes of its batch (operation conclusions track their delivery by it). */
  onWritten?: (seq: number) => void;
  /** The seq of the hub frame this frame answers (an error refusing it): see `SessionState.oweAnswer`. */
  answers?: number;
}

export function outItem<T extends MessageType>(
  type: T,
  payload: Payload<T>,
  replyTo: string | null = null,
  extra: Pick<OutItem, 'id' | 'onWritten' | 'answers'> = {},
): OutItem {
  return { type, payload, replyTo, ...extra };
}

/** Validate an application-supplied payload against the catalog; throws on a programming error. */
export function checkedPayload<T extends MessageType>(type: T, payload: unknown): Payload<T> {
  // A JavaScript caller (or a cast) can name a type the catalog does not have.
  if (!isKnownType(type)) throw new TypeError(`unknown message type ${String(type)}`);
  const parsed = CATALOG[type].schema.safeParse(payload);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new TypeError(`invalid ${type} payload at ${issue?.path.join('.') || 'payload'}: ${issue?.message ?? 'invalid'}`);
  }
  return parsed.data as Payload<T>;
}

/**
 * `checkedPayload` for an application report, which must also fit in one frame: a payload valid
 * field by field can still make a frame over the hub's `max_frame_bytes` (a deployment with
 * thousands of long replica ids). Refused with a RangeError where the caller can act on it, not
 * dropped at write time with a log line.
 */
export function reportablePayload<T extends MessageType>(type: T, payload: unknown, maxFrameBytes: number): Payload<T> {
  const checked = checkedPayload(type, payload);
  const bound = frameBytesBound(type, checked);
  if (bound > maxFrameBytes) {
    throw new RangeError(`${type} payload makes a frame of up to ${bound} bytes, over the hub's max_frame_bytes (${maxFrameBytes}): it could never be sent`);
  }
  return checked;
}

/** Queue class and coalescing key of an outgoing item. */
export function queueing(item: OutItem): { class: QueueClass; key: string | null } {
  const cls = queueClassOf(item.type);
  const key = cls === 'state' ? coalescingKey({ type: item.type, payload: item.payload } as TypedMessage) : null;
  return { class: cls, key };
}

/** Human-readable text a frame may lose to fit the hub's frame limit, in the order it is cut. */
const CUTTABLE = ['message', 'unknown_type'] as const;

/** JSON-encoded UTF-8 bytes of a string, as it sits in a frame. */
function jsonBytes(s: string): number {
  return utf8Length(JSON.stringify(s));
}

/**
 * `item` with its human-readable text (an error's or a conclusion's `message`, then an error's
 * `unknown_type`) cut, between code points, so that its frame is at least `excess` bytes smaller;
 * null when there is no such text left to cut. A hub may advertise a `max_frame_bytes` as small as
 * 4 KiB, while a message may hold 2,048 characters of up to 4 bytes: dropped as too big, an answer
 * or an operation's conclusion would never reach the hub, which cannot tell it was ever sent.
 */
export function fitted(item: OutItem, excess: number): OutItem | null {
  const payload = item.payload;
  if (payload === null || typeof payload !== 'object') return null;
  const p = { ...(payload as Record<string, unknown>) };
  let need = excess;
  for (const field of CUTTABLE) {
    const text = p[field];
    if (typeof text !== 'string' || text === '') continue;
    const chars = Array.from(text);
    const before = jsonBytes(text);
    // The longest prefix whose encoding is at least `need` bytes shorter (binary search).
    let lo = 0;
    let hi = chars.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (before - jsonBytes(chars.slice(0, mid).join('')) >= need) lo = mid;
      else hi = mid - 1;
    }
    const kept = chars.slice(0, lo).join('');
    need -= before - jsonBytes(kept);
    p[field] = kept;
    if (need <= 0) return { ...item, payload: p };
  }
  return null;
}
