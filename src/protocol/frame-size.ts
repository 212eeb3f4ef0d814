import type { MessageType } from './catalog';
import { buildFrame } from './frames';
import { utf8Length } from './sequencing';
import { LIMITS, MAX_REPLICAS } from './vocabulary';

/**
 * UTF-8 bytes of `JSON.stringify(v)`, counted without building the text: a size check on a
 * request that is otherwise never serialized (an admin PUT) costs a walk, not a copy. Escapes
 * count as JSON.stringify writes them (`\"` 2, `\n` 2, `\u0001` 6, a lone surrogate 6).
 */
export function jsonUtf8Length(v: unknown): number {
  switch (typeof v) {
    case 'string':
      return stringBytes(v);
    case 'number':
      return Number.isFinite(v) ? String(v).length : 4;
    case 'boolean':
      return v ? 4 : 5;
    case 'object': {
      if (v === null) return 4;
      if (Array.isArray(v)) {
        let n = 2 + Math.max(0, v.length - 1);
        // JSON.stringify writes an undefined element (or a function) as null.
        for (const e of v) n += e === undefined || typeof e === 'function' ? 4 : jsonUtf8Length(e);
        return n;
      }
      let n = 2;
      let first = true;
      for (const [k, e] of Object.entries(v)) {
        if (e === undefined || typeof e === 'function') continue;
        n += (first ? 0 : 1) + stringBytes(k) + 1 + jsonUtf8Length(e);
        first = false;
      }
      return n;
    }
    default:
      return 0;
  }
}

// Printable ASCII without `"` and `\`: written as is, one byte each (the common case, at native speed).
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

function stringBytes(s: string): number {
  if (PLAIN.test(s)) return s.length + 2;
  let n = 2;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20) n += c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d ? 2 : 6;
    else if (c === 0x22 || c === 0x5c) n += 2;
    else if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 6;
    } else if (c >= 0xdc00 && c <= 0xdfff) n += 6;
    else n += 3;
  }
  return n;
}

let overhead: number | null = null;

/**
 * The most bytes a deployment.desired frame around a serving configuration takes besides the
 * configuration itself: the envelope and payload at their longest (ids of the longest
 * identifier, revision, seq and ack at their largest, a reply_to), so that a check against it
 * holds for whatever revision and position in the stream the frame is written with.
 */
function desiredFrameOverhead(): number {
  if (overhead !== null) return overhead;
  const id = 'a'.repeat(LIMITS.ident);
  const ulid = '0'.repeat(26);
  const frame = buildFrame({
    type: 'deployment.desired',
    payload: {
      deployment_id: id,
      workload_id: id,
      revision: Number.MAX_SAFE_INTEGER,
      min_replicas: MAX_REPLICAS,
      max_replicas: MAX_REPLICAS,
      serving: null,
      deleted: false,
    },
    seq: Number.MAX_SAFE_INTEGER,
    ack: Number.MAX_SAFE_INTEGER,
    reply_to: ulid,
    id: ulid,
    now: 0,
  });
  // ASCII throughout; `null` is where the configuration goes.
  overhead = frame.length - 'null'.length;
  return overhead;
}

/**
 * An upper bound on the UTF-8 size of any deployment.desired frame carrying `serving` (exact
 * for the configuration, worst case for everything around it).
 */
export function desiredFrameBytes(serving: unknown): number {
  return desiredFrameOverhead() + jsonUtf8Length(serving);
}

/** A frame's UTF-8 size when it is over `max`, else 0 (counted exactly only for text near it). */
export function bytesOver(text: string, max: number): number {
  if (text.length * 3 <= max) return 0;
  const bytes = utf8Length(text);
  return bytes > max ? bytes : 0;
}

/**
 * An upper bound on the UTF-8 size of the operation.start frame for an operation of this kind,
 * target and params, whatever its id, deadline, seq and ack (each at its longest).
 */
export function operationStartFrameBytes(op: { kind: string; target: string; params: Record<string, unknown> }): number {
  const ulid = '0'.repeat(26);
  const frame = buildFrame({
    type: 'operation.start',
    payload: { operation_id: ulid, kind: op.kind, target: '', params: {}, deadline: '+275760-09-13T00:00:00.000Z' } as never,
    seq: Number.MAX_SAFE_INTEGER,
    ack: Number.MAX_SAFE_INTEGER,
    reply_to: ulid,
    id: ulid,
    now: 0,
  });
  // The frame above holds an empty target ('""') and params ('{}'): add theirs in their place.
  return utf8Length(frame) - 4 + jsonUtf8Length(op.target) + jsonUtf8Length(op.params);
}

const overheadByType = new Map<string, number>();

/**
 * An upper bound on the UTF-8 size of any frame of `type` carrying `payload`, whatever its id,
 * seq, ack, reply_to and ts (each at its longest): exact for the payload, at most about 60 bytes
 * over for the envelope around it. Counted without serializing the payload.
 */
export function frameBytesBound(type: MessageType, payload: unknown): number {
  let overhead = overheadByType.get(type);
  if (overhead === undefined) {
    const ulid = '0'.repeat(26);
    const empty = buildFrame({ type, payload: {} as never, seq: Number.MAX_SAFE_INTEGER, ack: Number.MAX_SAFE_INTEGER, reply_to: ulid, id: ulid, now: 0 });
    overhead = utf8Length(empty) - 2;
    overheadByType.set(type, overhead);
  }
  return overhead + jsonUtf8Length(payload);
}
