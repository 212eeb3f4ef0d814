import { monotonicFactory } from 'ulid';
import { CATALOG, decodePayload, isKnownType, type MessageType, type Payload, type TypedMessage } from './catalog';
import { decodeEnvelope, encodeEnvelope, ENVELOPE_VERSION, frameProblem, timestamp, type Envelope } from './envelope';

// Created on first use: Workers forbid generating random values at global scope.
let ulid: ReturnType<typeof monotonicFactory> | null = null;

/**
 * The factory asks its generator for one value per character, sixteen per id, and the default
 * one calls `crypto.getRandomValues` for each single byte: a call into the runtime that costs more
 * than the byte. The same generator's bytes, drawn a pool at a time.
 */
const POOL_BYTES = 256;
let pool: Uint8Array | null = null;
let taken = POOL_BYTES;
function pooledRandom(): number {
  if (taken === POOL_BYTES) {
    pool ??= new Uint8Array(POOL_BYTES);
    crypto.getRandomValues(pool);
    taken = 0;
  }
  return (pool as Uint8Array)[taken++]! / 256;
}

/** The last millisecond a ULID's 48-bit time can hold (year 10889). */
const ULID_TIME_MAX = 2 ** 48 - 1;

/**
 * A new frame id (ULID, monotonic within this process). A clock outside what a ULID can hold
 * (before 1970, past year 10889) is held to its ends, as `timestamp` holds the ts: the factory
 * throws there (a negative time as its first, a time past the end at every call after), and a
 * frame that cannot be built is an operator that cannot even say hello. 1, not 0: the factory
 * reads 0 as "no time given" and asks the same wrong clock again.
 */
export function newId(now: number = Date.now()): string {
  ulid ??= monotonicFactory(pooledRandom);
  return ulid(Math.min(ULID_TIME_MAX, Math.max(1, now)));
}

export interface FrameFields<T extends MessageType> {
  type: T;
  payload: Payload<T>;
  seq?: number | null;
  ack?: number | null;
  reply_to?: string | null;
  id?: string;
  now?: number;
}

/** Build one frame's text. */
export function buildFrame<T extends MessageType>(f: FrameFields<T>): string {
  const now = f.now ?? Date.now();
  return encodeEnvelope({
    v: ENVELOPE_VERSION,
    type: f.type,
    id: f.id ?? newId(now),
    seq: f.seq ?? null,
    ack: f.ack ?? null,
    reply_to: f.reply_to ?? null,
    ts: timestamp(now),
    payload: f.payload,
  });
}

function canonicalLiveness(type: 'ping' | 'pong', ack: number): string {
  if (!Number.isSafeInteger(ack) || ack < 0) throw new RangeError(`${type} ack must be a non-negative integer, got ${ack}`);
  // Spelled out rather than serialized: this exact text is what the hub's runtime matches.
  return `{"v":${ENVELOPE_VERSION},"type":"${type}","id":null,"seq":null,"ack":${ack},"reply_to":null,"ts":null,"payload":{}}`;
}

/**
 * The one text of a ping carrying `ack` (the sender's durable contiguous cursor of the peer's
 * stream, 0 when it has none). No id, no ts: an idle operator's pings are byte-identical, so the
 * hub's runtime can answer them without waking the session object (MESSAGES.md, `ping`).
 */
export function canonicalPing(ack: number): string {
  return canonicalLiveness('ping', ack);
}

/** The one text of a pong carrying `ack`; see `canonicalPing`. */
export function canonicalPong(ack: number): string {
  return canonicalLiveness('pong', ack);
}

/** What one received text frame turned out to be. */
export type Incoming =
  /** The envelope cannot be read, or its `v` is out of range: close 4400. */
  | { kind: 'fatal'; reason: string; id: string | null }
  /** A type this side does not know: count it, ack it, answer with an error naming the type. */
  | { kind: 'unknown'; envelope: Envelope }
  /** Readable envelope, unusable frame: count it, ack it, log it loudly, record the rejection. */
  | { kind: 'poison'; envelope: Envelope; reason: string }
  | { kind: 'message'; envelope: Envelope; message: TypedMessage };

/** Decode a frame in two layers: only the envelope can be fatal, never the payload. Never throws. */
export function readFrame(text: string): Incoming {
  const env = decodeEnvelope(text);
  if (!env.ok) return { kind: 'fatal', reason: env.reason, id: env.id };
  const envelope = env.envelope;
  try {
    return readPayload(text, envelope);
  } catch (err) {
    // A payload no check foresaw must not escape as an exception: the frame's seq would go
    // uncounted and the next frame would read as a gap. It is a poison frame like any other.
    return { kind: 'poison', envelope, reason: `payload could not be read: ${err instanceof Error ? err.message : String(err)}`.slice(0, 512) };
  }
}

function readPayload(text: string, envelope: Envelope): Incoming {
  const problem = frameProblem(envelope);
  const payload = decodePayload(envelope.type, envelope.payload);
  if (!payload.ok && payload.unknownType) return { kind: 'unknown', envelope };
  if (problem) return { kind: 'poison', envelope, reason: problem };
  if (!payload.ok) return { kind: 'poison', envelope, reason: payload.reason };
  // A `__proto__` key parses as an own property but vanishes from any object built from it (the
  // schemas drop it in silence): within a field the schema reads, a label or a param would be lost
  // with no error, so refuse it instead. An unknown field is ignored, whatever it holds. Cheap
  // unless the text could hold one.
  if (text.includes('__proto__') || text.includes('\\u')) {
    const at = protoKeyPath(envelope.payload, knownFields(envelope.type));
    if (at !== null) return { kind: 'poison', envelope, reason: `payload key ${at} is not allowed` };
  }
  return { kind: 'message', envelope, message: payload.message };
}

const fieldsByType = new Map<string, ReadonlySet<string> | null>();

/** The payload fields a type's schema reads, or null when its schema is not a plain object. */
function knownFields(type: string): ReadonlySet<string> | null {
  let f = fieldsByType.get(type);
  if (f === undefined) {
    const schema: unknown = isKnownType(type) ? CATALOG[type].schema : null;
    const shape = schema !== null && typeof schema === 'object' && 'shape' in schema ? (schema as { shape: unknown }).shape : null;
    f = shape !== null && typeof shape === 'object' ? new Set(Object.keys(shape)) : null;
    fieldsByType.set(type, f);
  }
  return f;
}

/**
 * The dotted path of the first own `__proto__` key in a parsed JSON value (depth first, keys in
 * order), or null; at the top, only the fields in `known` are looked into (null: all of them).
 * Iterative: an unknown field may nest as deep as the frame's size allows.
 */
function protoKeyPath(root: unknown, known: ReadonlySet<string> | null): string | null {
  const stack: { v: unknown; path: string; proto: boolean }[] = [{ v: root, path: 'payload', proto: false }];
  for (let e = stack.pop(); e !== undefined; e = stack.pop()) {
    if (e.proto) return e.path;
    const v = e.v;
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: `${e.path}.${i}`, proto: false });
      continue;
    }
    const keys = Object.keys(v);
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i] as string;
      if (v === root && known !== null && !known.has(key)) continue;
      stack.push({ v: (v as Record<string, unknown>)[key], path: `${e.path}.${key}`, proto: key === '__proto__' });
    }
  }
  return null;
}
