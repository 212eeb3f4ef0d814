import { z } from 'zod';

/** The envelope version this side writes. */
export const ENVELOPE_VERSION = 1;
/** The oldest envelope version this side still reads. */
export const MIN_ENVELOPE_VERSION = 1;

/** Types that carry no seq and never enter a replay buffer. Everything else is sequenced. */
export const UNSEQUENCED_TYPES: ReadonlySet<string> = new Set(['hello', 'welcome', 'ping', 'pong', 'ack']);

export function isSequencedType(type: string): boolean {
  return !UNSEQUENCED_TYPES.has(type);
}

/**
 * Types that may travel without an `id` and a `ts` (written `null`): the canonical liveness
 * frames. An idle operator's ping must be byte-identical from one interval to the next so the
 * hub's runtime can answer it without waking the session object (it matches the text exactly);
 * a per-frame id or timestamp would make every ping unique. Nothing ever replies to a ping's or
 * a pong's id, so nothing is lost. Every other type keeps requiring both.
 */
export const ANONYMOUS_TYPES: ReadonlySet<string> = new Set(['ping', 'pong']);

// 26 Crockford characters hold 130 bits and a ULID is 128: one above 7ZZZ…Z is an overflow the
// ULID spec refuses, and no generator makes one.
export const ULID_RE = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/;
/** RFC 3339 timestamp in UTC or with an offset; fractional seconds optional; T and Z in either case (5.6). */
export const RFC3339_RE = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$/;

/** The first and last milliseconds of years 1 to 9999 in UTC: what RFC 3339 can write in UTC. */
const FIRST_UTC_MS = -62135596800000;
const LAST_UTC_MS = 253402300799999;

const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const;

/**
 * An RFC 3339 timestamp that names a time: the pattern alone admits hour 25 or minute 61. A time
 * that is stored must also fall in years 1 to 9999 in UTC, where it can be read back as RFC 3339
 * in UTC (year 0001 an hour east of UTC is 1 BC; Postgres stores it, but no UTC time names it).
 * `yearZero`: a time that is never stored (the envelope's `ts`): any year, 0000 too.
 */
export function namesTime(s: string, yearZero = false): boolean {
  return namesUtcTime(s, yearZero) ?? namesTimeByParse(s, yearZero);
}

/** Two ASCII digits at `i` as a number, or -1. */
function twoDigits(s: string, i: number): number {
  const a = s.charCodeAt(i) - 48;
  const b = s.charCodeAt(i + 1) - 48;
  return a >= 0 && a <= 9 && b >= 0 && b <= 9 ? a * 10 + b : -1;
}

/**
 * `namesTime` for a time written in UTC (ending Z or z, as every SDK and the hub write them), by
 * reading its digits: the regex and Date.parse took 0.28 µs a call, once or twice per ingested
 * frame (bench/MICRO.md). Undefined where it does not decide (an offset, a leap second: the
 * general path). test/unit/protocol/envelope.test.ts proves it agrees with the general path.
 */
function namesUtcTime(s: string, yearZero: boolean): boolean | undefined {
  const n = s.length;
  const end = s.charCodeAt(n - 1);
  if (end !== 0x5a && end !== 0x7a) return undefined;
  // YYYY-MM-DDTHH:MM:SS then Z, or . and 1 to 9 digits then Z.
  if (n !== 20 && (n < 22 || n > 30)) return false;
  if (s.charCodeAt(4) !== 0x2d || s.charCodeAt(7) !== 0x2d || s.charCodeAt(13) !== 0x3a || s.charCodeAt(16) !== 0x3a) return false;
  const t = s.charCodeAt(10);
  if (t !== 0x54 && t !== 0x74) return false;
  if (n > 20) {
    if (s.charCodeAt(19) !== 0x2e) return false;
    for (let i = 20; i < n - 1; i++) {
      const d = s.charCodeAt(i) - 48;
      if (d < 0 || d > 9) return false;
    }
  }
  const hi = twoDigits(s, 0);
  const lo = twoDigits(s, 2);
  const month = twoDigits(s, 5);
  const day = twoDigits(s, 8);
  const hour = twoDigits(s, 11);
  const minute = twoDigits(s, 14);
  const second = twoDigits(s, 17);
  if (hi < 0 || lo < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0) return false;
  if (second === 60) return undefined;
  const year = hi * 100 + lo;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : (MONTH_DAYS[month - 1] ?? 0);
  // In UTC, years 1 to 9999 are exactly the range a stored time must fall in.
  return (year >= 1 || yearZero) && day >= 1 && day <= days && hour <= 23 && minute <= 59 && second <= 59;
}

/**
 * The instant (ms since the epoch) a time `namesTime` accepts names, NaN for none. A leap second
 * (second 60) is RFC 3339's and Postgres's, not Date.parse's (NaN): it is read at second 59 and a
 * second added, the next minute's start, as Postgres rolls it over. Whoever acts on a time the
 * schema admitted reads it here, not with Date.parse.
 */
export function timeMs(s: string): number {
  const leapSecond = s.charCodeAt(17) === 0x36 && s.charCodeAt(18) === 0x30;
  return leapSecond ? Date.parse(`${s.slice(0, 17)}59${s.slice(19)}`) + 1000 : Date.parse(s);
}

/** `namesTime` by the pattern and Date.parse: any RFC 3339 form. Exported for the agreement test. */
export function namesTimeByParse(s: string, yearZero = false): boolean {
  if (!RFC3339_RE.test(s)) return false;
  const instant = timeMs(s);
  if (Number.isNaN(instant)) return false;
  if (!yearZero && (instant < FIRST_UTC_MS || instant > LAST_UTC_MS)) return false;
  // Date.parse rolls a day past its month's end over (Feb 31 reads as Mar 3) and takes 24:00 as
  // the next midnight; RFC 3339 admits neither, so what it accepts is not yet a time.
  const year = Number(s.slice(0, 4));
  const month = Number(s.slice(5, 7));
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : (MONTH_DAYS[month - 1] ?? 0);
  // Year 0000 as written is RFC 3339's, and with a negative offset its instant can fall in year 1
  // UTC: the instant's range (above) decides, not the year as written (the database is given
  // such a time in UTC, utcTime in db/ingest-rows.ts).
  return Number(s.slice(8, 10)) <= days && Number(s.slice(11, 13)) <= 23;
}

/** What an HTTP header value may carry of an id sent back in one (printable ASCII, no spaces). */
export const HEADER_SAFE_RE = /^[\x21-\x7E]+$/;

/**
 * The envelope layer: only what sequencing needs is fatal when malformed (the object shape, `v`,
 * a `type` that is not a string, `seq` of a sequenced frame, `ack`). Any value of `id`,
 * `reply_to` or `ts` decodes, and a bad one (not a string, longer than any id or time, not a ULID
 * or a time) makes a poison frame in `frameProblem`: counted, acknowledged and answered, not a
 * dead connection that a sequenced frame would kill again at every resume. Any type string
 * decodes too: an empty or overlong one is a type nobody knows, answered as such.
 *
 * This schema is the contract; `decodeEnvelope` checks every frame with `envelopeProblem` below,
 * straight-line code proven to accept exactly what it accepts (test/unit/protocol/
 * envelope.property.test.ts), because zod's interpreted path (the only one on Workers) is a
 * large share of a frame's cost.
 */
export const EnvelopeSchema = z.object({
  v: z.number().int(),
  // Any type string decodes: an unknown type is never fatal.
  type: z.string(),
  id: z.unknown().optional(),
  seq: z.number().int().positive().max(Number.MAX_SAFE_INTEGER).nullish(),
  ack: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER).nullish(),
  reply_to: z.unknown().optional(),
  ts: z.unknown().optional(),
  // Absent is not fatal: a frame without a payload is one whose payload is unusable (poison,
  // frameProblem), counted and acknowledged; only the envelope is fatal.
  payload: z.unknown().optional(),
});

/** The longest `id`, `reply_to` or `ts` an envelope keeps; anything longer is unusable anyway. */
export const ENVELOPE_TEXT_MAX = 64;

/** A decoded envelope. `payload` is still undecoded: only the envelope can be fatal. */
export interface Envelope {
  v: number;
  type: string;
  /** '' when absent, null or unusable (not a string, overlong): see `frameProblem`. */
  id: string;
  /** null on unsequenced types. */
  seq: number | null;
  /** The sender's contiguous cursor of what it has durably processed, or null. */
  ack: number | null;
  /** null when absent or null; '' when unusable (not a string, overlong): never a ULID, so poison. */
  reply_to: string | null;
  ts: string;
  payload: unknown;
  /**
   * The first of `id`, `reply_to`, `ts` that was present but unusable (not a string, overlong). Its
   * field holds '', as an absent id or ts does: this says which it was, so that a ping or a pong,
   * which may leave id and ts out, is not taken as one that did.
   */
  unusable?: 'id' | 'reply_to' | 'ts';
}

export type EnvelopeDecode =
  | { ok: true; envelope: Envelope }
  /** Fatal: the connection must close (4400). `id` is the frame's id when it could be read. */
  | { ok: false; reason: string; id: string | null };

function fail(reason: string, raw: unknown): EnvelopeDecode {
  let id: string | null = null;
  if (raw && typeof raw === 'object' && !Array.isArray(raw)) {
    const candidate = (raw as { id?: unknown }).id;
    if (typeof candidate === 'string' && ULID_RE.test(candidate)) id = candidate;
  }
  return { ok: false, reason, id };
}

/** A string of at most `max` characters as zod counts them (code points). */
function fits(s: string, max: number): boolean {
  if (s.length <= max) return true;
  let n = s.length;
  for (let i = 0; i < s.length - 1 && n > max; i++) {
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n--;
      i++;
    }
  }
  return n <= max;
}

/** At most `max` characters of `s`, counted and cut between code points, never inside a pair. */
export function cutText(s: string, max: number): string {
  if (fits(s, max)) return s;
  let end = 0;
  for (let n = 0; n < max && end < s.length; n++) {
    end += (s.charCodeAt(end) & 0xfc00) === 0xd800 && (s.charCodeAt(end + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
  }
  return s.slice(0, end);
}

/** An envelope text field as decoded: `absent` for null or missing, '' for anything unusable. */
function envelopeText<T>(v: unknown, absent: T): string | T {
  if (v === null || v === undefined) return absent;
  return typeof v === 'string' && fits(v, ENVELOPE_TEXT_MAX) ? v : '';
}

/** What `EnvelopeSchema` would refuse in a parsed JSON object, as `field: why`, or null. */
export function envelopeProblem(raw: Record<string, unknown>): string | null {
  const { v, type, seq, ack } = raw;
  if (!Number.isSafeInteger(v)) return 'v: expected an integer';
  if (typeof type !== 'string') return 'type: expected a string';
  if (seq !== null && seq !== undefined && !(Number.isSafeInteger(seq) && (seq as number) > 0)) return 'seq: expected a positive integer, or null';
  if (ack !== null && ack !== undefined && !(Number.isSafeInteger(ack) && (ack as number) >= 0)) return 'ack: expected a non-negative integer, or null';
  return null;
}

/**
 * The id an answer may name in its reply_to: the frame's id when it is a ULID, else null. An
 * answer to a malformed frame (the error before a 4400, say) must not copy the operator's text
 * into a field the operator checks as an id.
 */
export function answerableId(id: string | null | undefined): string | null {
  return typeof id === 'string' && ULID_RE.test(id) ? id : null;
}

/** Decode one text frame's envelope. Never throws. */
export function decodeEnvelope(text: string): EnvelopeDecode {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return fail('frame is not JSON', undefined);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return fail('frame is not a JSON object', undefined);
  }
  const o = raw as Record<string, unknown>;
  const problem = envelopeProblem(o);
  if (problem !== null) return fail(`envelope field ${problem}`, raw);
  const e = o as { v: number; type: string; seq?: number | null; ack?: number | null; payload?: unknown };
  if (e.v < MIN_ENVELOPE_VERSION || e.v > ENVELOPE_VERSION) {
    return fail(`envelope version ${e.v} outside [${MIN_ENVELOPE_VERSION}, ${ENVELOPE_VERSION}]`, raw);
  }
  let sequenced = isSequencedType(e.type);
  if (sequenced && (e.seq === null || e.seq === undefined)) {
    // A connection-level error (a handshake refusal, the error before a 4400 close) belongs to
    // no session stream: it travels without a seq and is never replayed.
    if (e.type !== 'error') return fail(`sequenced type ${cutText(e.type, 64)} without seq`, raw);
    sequenced = false;
  }
  const envelope: Envelope = {
    v: e.v,
    type: e.type,
    id: envelopeText(o.id, ''),
    seq: sequenced ? (e.seq as number) : null,
    ack: e.ack ?? null,
    reply_to: envelopeText(o.reply_to, null),
    ts: envelopeText(o.ts, ''),
    payload: e.payload,
  };
  // '' from a value that was neither '' nor null/absent: unusable. (Cheap on the hot path: a
  // frame's id and ts are non-empty strings.)
  if (envelope.id === '' && o.id !== '' && o.id != null) envelope.unusable = 'id';
  else if (envelope.reply_to === '' && o.reply_to !== '') envelope.unusable = 'reply_to';
  else if (envelope.ts === '' && o.ts !== '' && o.ts != null) envelope.unusable = 'ts';
  return { ok: true, envelope };
}

/**
 * What makes a decodable envelope unusable as a frame (a poison frame), or null. A poison
 * sequenced frame is still counted and acknowledged.
 */
export function frameProblem(e: Envelope): string | null {
  // A decoded envelope holds '' for an id or ts that was null or absent (or unusable, `unusable`).
  if (e.unusable === 'id') return 'envelope id is not a ULID';
  if (e.unusable === 'reply_to') return 'envelope reply_to is not a ULID';
  if (e.unusable === 'ts') return 'envelope ts is not an RFC 3339 timestamp';
  const anonymous = ANONYMOUS_TYPES.has(e.type);
  if (!(anonymous && e.id === '') && !ULID_RE.test(e.id)) return 'envelope id is not a ULID';
  if (e.reply_to !== null && !ULID_RE.test(e.reply_to)) return 'envelope reply_to is not a ULID';
  if (!(anonymous && e.ts === '') && !namesTime(e.ts, true)) {
    return 'envelope ts is not an RFC 3339 timestamp';
  }
  if (e.payload === null || typeof e.payload !== 'object' || Array.isArray(e.payload)) {
    return 'payload is not a JSON object';
  }
  return null;
}

/** Serialize with a fixed key order; an absent id or ts (decoded as '') is written null. */
export function encodeEnvelope(e: Envelope): string {
  return JSON.stringify({
    v: e.v,
    type: e.type,
    id: e.id === '' ? null : e.id,
    seq: e.seq,
    ack: e.ack,
    reply_to: e.reply_to,
    ts: e.ts === '' ? null : e.ts,
    payload: e.payload,
  });
}

/**
 * Milliseconds-precision RFC 3339, as the envelope's `ts` (and an event's default `occurred_at`)
 * is written. A clock that reads outside years 1 to 9999 is held to their ends: toISOString would
 * write year +010000 (or -000001), which is no RFC 3339 time, and the peer would refuse every
 * frame, the hello first, for a clock that is merely wrong.
 */
export function timestamp(ms: number): string {
  return new Date(Math.min(LAST_UTC_MS, Math.max(FIRST_UTC_MS, ms))).toISOString();
}
