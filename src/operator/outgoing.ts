import { CATALOG, coalescingKey, isKnownType, queueClassOf, type MessageType, type Payload, type QueueClass, type TypedMessage } from '../protocol';

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
}

export function outItem<T extends MessageType>(
  type: T,
  payload: Payload<T>,
  replyTo: string | null = null,
  extra: Pick<OutItem, 'id' | 'onWritten'> = {},
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

/** Queue class and coalescing key of an outgoing item. */
export function queueing(item: OutItem): { class: QueueClass; key: string | null } {
  const cls = queueClassOf(item.type);
  const key = cls === 'state' ? coalescingKey({ type: item.type, payload: item.payload } as TypedMessage) : null;
  return { class: cls, key };
}
