/**
 * The fixture corpus (fixtures/*.json and fixtures/forms/*.json) as frames a test peer can send.
 * A scripted peer must send what the real peer sends, so it builds every frame from the fixture
 * of its type or form: the fixture decides the envelope's keys, their order and which of them are
 * null (a canonical ping has no id and no ts; a connection-level error has no seq); the test
 * fills in only what belongs to the live link (ids, numbering, cursors, correlation, payload).
 * Node only (reads the files).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CATALOG, isKnownType, newId, type Direction, type MessageType } from '../../src/protocol';

const FIXTURE_DIR = join(import.meta.dirname, '../../fixtures');

/** A fixture file's envelope, as written. */
export interface FixtureEnvelope {
  v: number;
  type: string;
  id: string | null;
  seq: number | null;
  ack: number | null;
  reply_to: string | null;
  ts: string | null;
  payload: Record<string, unknown>;
}

export interface Fixture {
  /** `ping`, `error`, or `error.connection` for a form. */
  name: string;
  /** The path under fixtures/ (`forms/error.connection.json`). */
  file: string;
  type: MessageType;
  /** True for a file under fixtures/forms/. */
  form: boolean;
  direction: Direction;
  envelope: FixtureEnvelope;
}

function load(): Fixture[] {
  const read = (dir: string, form: boolean): Fixture[] =>
    readdirSync(join(FIXTURE_DIR, dir))
      .filter((f) => f.endsWith('.json'))
      .sort()
      .map((f) => {
        const file = dir ? `${dir}/${f}` : f;
        const envelope = JSON.parse(readFileSync(join(FIXTURE_DIR, file), 'utf8')) as FixtureEnvelope;
        if (!isKnownType(envelope.type)) throw new Error(`fixture ${file}: unknown type ${envelope.type}`);
        return { name: f.replace(/\.json$/, ''), file, type: envelope.type, form, direction: CATALOG[envelope.type].direction, envelope };
      });
  return [...read('', false), ...read('forms', true)];
}

/** Every fixture, canonical examples first, then the forms. */
export const FIXTURES: readonly Fixture[] = load();

export function fixture(name: string): Fixture {
  const f = FIXTURES.find((x) => x.name === name);
  if (!f) throw new Error(`no fixture named ${name}`);
  return f;
}

/** Fixtures a peer in `from`'s position may send (its own direction or `both`). */
export function sendableBy(from: 'operator' | 'hub'): Fixture[] {
  const own: Direction = from === 'operator' ? 'op->hub' : 'hub->op';
  return FIXTURES.filter((f) => f.direction === own || f.direction === 'both');
}

export interface FrameFill {
  /** Default: a new ULID (kept null when the fixture's id is null). */
  id?: string;
  /** Required when the fixture is sequenced; ignored when its seq is null. */
  seq?: number;
  /** Default: null when the fixture's ack is null, else 0. */
  ack?: number | null;
  reply_to?: string | null;
  /** Default: the fixture's own payload. */
  payload?: unknown;
  now?: number;
}

/**
 * One frame's text from a fixture: the fixture's envelope shape with this link's values. A null
 * id, seq or ts in the fixture stays null (that is the form); anything else is filled in.
 */
export function frameFrom(f: Fixture, fill: FrameFill = {}): string {
  const now = fill.now ?? Date.now();
  const e = f.envelope;
  if (e.seq !== null && fill.seq === undefined) throw new Error(`fixture ${f.name} is sequenced: give the frame a seq`);
  const values: Record<keyof FixtureEnvelope, unknown> = {
    v: e.v,
    type: e.type,
    id: e.id === null ? null : (fill.id ?? newId(now)),
    seq: e.seq === null ? null : fill.seq,
    // A fixture with a cursor stands for a sender that always carries one: 0 until told otherwise.
    ack: fill.ack !== undefined ? fill.ack : e.ack === null ? null : 0,
    reply_to: fill.reply_to ?? null,
    ts: e.ts === null ? null : new Date(now).toISOString(),
    payload: fill.payload ?? e.payload,
  };
  // The fixture's key order, so a frame the hub runtime matches by text comes out identical.
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(e) as (keyof FixtureEnvelope)[]) out[k] = values[k];
  return JSON.stringify(out);
}
