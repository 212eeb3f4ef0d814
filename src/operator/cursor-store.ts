/**
 * The durable resume state, kept beside the cluster's own state (the spec: "the resume cursor
 * must be durable; it lives beside the CRDs, not in memory").
 *
 * One record holds everything that must agree with what was said on the wire:
 * - `sessionId`: the session to resume (`hello.session_id`, `Wingsmith-Session`);
 * - `cursor`: the contiguous applied cursor of the hub's stream (`hello.resume_from`). The SDK
 *   saves it *before* any frame carrying it as `ack` is written, so the hub never learns of a
 *   cursor the operator could forget;
 * - `outbound`: the outbound numbering (next seq, peer ack, lost-through);
 * - `clean`: true only when written by a graceful stop that left nothing unsent and nothing
 *   unacknowledged; a start overwrites it with false at once, so a crash is always detectable;
 * - `operations`: the operations this cluster has accepted, so a restart neither re-runs a
 *   concluded one nor forgets to report it;
 * - `hubSnapshotOpen`: a hub resync stream of deployments was open (its `resync.begin` applied,
 *   its `stream.end` not yet). A process that restarts with it set cannot prune against that
 *   snapshot (the frames before the restart are gone from memory), so its hello says `lossy` and
 *   a fresh session brings a whole new snapshot;
 * - `displacedSession`: the session this operator was displaced from (close 4409), kept for
 *   diagnostics only: `sessionId` is null from then on, so it is never resumed;
 * - `appliedPastCursor`: desired revisions applied behind a hole, which a replay delivers again.
 */
import { readFile, rename } from 'node:fs/promises';
import { z } from 'zod';
import { ERROR_CODES, OPERATION_KINDS, OPERATION_OUTCOMES } from '../protocol';
import { writeFileAtomic, type AtomicWriteHooks } from './atomic-file';
import { crc32Hex } from './crc32';

const Count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

const Conclusion = z.discriminatedUnion('frame', [
  z.object({ frame: z.literal('result'), outcome: z.enum(OPERATION_OUTCOMES), message: z.string() }),
  z.object({ frame: z.literal('error'), code: z.enum(ERROR_CODES), message: z.string() }),
]);
export type StoredConclusion = z.infer<typeof Conclusion>;

const OperationRecordSchema = z.object({
  operationId: z.string().min(1),
  /** The `operation.start` frame id the reports reply to. */
  startId: z.string().min(1),
  kind: z.enum(OPERATION_KINDS),
  /** Wall-clock ms. */
  deadline: z.number(),
  acceptedAt: z.number(),
  state: z.enum(['running', 'concluded']),
  conclusion: Conclusion.nullable(),
  concludedAt: z.number().nullable(),
  /** The conclusion frame was acknowledged by the hub. */
  delivered: z.boolean(),
  /**
   * The session in which the hub acknowledged it (absent from records written before it was kept).
   * A start redelivered in that session is a replay of one the hub already has the answer to.
   */
  deliveredIn: z.string().max(128).nullable().optional(),
});
export type OperationRecord = z.infer<typeof OperationRecordSchema>;

const DurableRecordSchema = z.object({
  version: z.literal(1),
  sessionId: z.string().min(1).max(128).nullable(),
  cursor: Count,
  outbound: z.object({ nextSeq: z.number().int().positive(), peerAck: Count, lostThrough: Count }),
  clean: z.boolean(),
  operations: z.array(OperationRecordSchema),
  // Added after the first release: a record written before has neither.
  hubSnapshotOpen: z.boolean().optional(),
  displacedSession: z.string().min(1).max(128).nullable().optional(),
  /**
   * The session can no longer serve as a resume base (the hub closed 1009 over a frame in its
   * buffer, a resume was turned down, the log failed to sync): the next hello says lossy, whatever
   * the log seems to vouch for, until a fresh session replaces it.
   */
  lossy: z.boolean().optional(),
  /**
   * `deployment.desired` revisions applied past the cursor (behind a hole): a replay delivers
   * them and the frames around them again, and the process continuing the session must not apply
   * an older revision over one the cluster already has (applied-revisions.ts).
   */
  appliedPastCursor: z
    .array(z.object({ deploymentId: z.string().min(1), revision: Count, seq: z.number().int().positive(), withdrawn: z.boolean().optional() }))
    .optional(),
});
export type DurableRecord = z.infer<typeof DurableRecordSchema>;

export function emptyRecord(): DurableRecord {
  return {
    version: 1,
    sessionId: null,
    cursor: 0,
    outbound: { nextSeq: 1, peerAck: 0, lostThrough: 0 },
    clean: false,
    operations: [],
    hubSnapshotOpen: false,
    displacedSession: null,
    lossy: false,
    appliedPastCursor: [],
  };
}

/** Thrown by `load` when a record exists but cannot be read: the caller decides what that costs. */
export class CorruptCursorStoreError extends Error {
  override readonly name = 'CorruptCursorStoreError';
}

export interface CursorStore {
  /** The last saved record, or null when none was ever saved. */
  load(): Promise<DurableRecord | null>;
  /** Replace the record durably: when this resolves, a crash cannot lose it. */
  save(record: DurableRecord): Promise<void>;
}

/** Validate a record read from outside the process (disk, a test's hand-made value). */
export function parseRecord(value: unknown): DurableRecord {
  const parsed = DurableRecordSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new CorruptCursorStoreError(`cursor record ${issue?.path.join('.') || 'root'}: ${issue?.message ?? 'invalid'}`);
  }
  return parsed.data;
}

/** For tests and for operators whose cluster state is itself in memory. Survives only its object. */
export class MemoryCursorStore implements CursorStore {
  private record: DurableRecord | null;
  /** How many saves happened: lets tests check that something was persisted. */
  saves = 0;

  constructor(initial: DurableRecord | null = null) {
    this.record = initial ? structuredClone(initial) : null;
  }

  async load(): Promise<DurableRecord | null> {
    return this.record ? structuredClone(this.record) : null;
  }

  async save(record: DurableRecord): Promise<void> {
    this.record = structuredClone(record);
    this.saves++;
  }

  /** The saved record (a copy), synchronously: for assertions. */
  peek(): DurableRecord | null {
    return this.record ? structuredClone(this.record) : null;
  }
}

/**
 * The record as the file holds it: its JSON with a `checksum` last, the CRC-32 of the JSON
 * before it. A flipped bit that keeps the JSON valid and the schema satisfied (a cursor's digit,
 * a session id's letter) would otherwise be read as the truth: a raised cursor skips the hub's
 * frames after it on the next resume, without a gap to notice.
 */
export function recordText(record: DurableRecord): string {
  return JSON.stringify({ ...record, checksum: crc32Hex(JSON.stringify(record)) }) + '\n';
}

/**
 * The record in a file's text. A record without a checksum was written by an SDK before it was
 * kept, and is read as it is; one whose checksum does not match its JSON is corrupt.
 */
export function readRecordText(text: string, where: string): DurableRecord {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new CorruptCursorStoreError(`cursor file ${where} is not JSON`);
  }
  if (json !== null && typeof json === 'object' && !Array.isArray(json) && 'checksum' in json) {
    const { checksum, ...rest } = json as Record<string, unknown>;
    // Parsing and writing again gives the same text as the save's: the key order is kept, and
    // every number and string the record holds is written in its one shortest form.
    if (typeof checksum !== 'string' || crc32Hex(JSON.stringify(rest)) !== checksum) {
      throw new CorruptCursorStoreError(`cursor file ${where} does not match its checksum`);
    }
    return parseRecord(rest);
  }
  return parseRecord(json);
}

/**
 * A JSON file replaced atomically on every save (temp file, fsync, rename, fsync the directory).
 * A crash between the write and the rename leaves the previous record in place and a stray temp
 * file that the next save supersedes. Saves are serialized; a save requested while one is being
 * written coalesces with any other waiting one (the newest record wins).
 */
export class FileCursorStore implements CursorStore {
  private writing: Promise<void> = Promise.resolve();
  private queued: { text: string; waiters: { resolve: () => void; reject: (e: unknown) => void }[] } | null = null;

  /**
   * @param guard runs before every write; throws when the file may not be written any more (the
   *   state directory's lock was lost), and the save is refused with its error.
   */
  constructor(
    readonly path: string,
    private readonly hooks?: AtomicWriteHooks,
    private readonly guard: () => void = () => {},
  ) {}

  async load(): Promise<DurableRecord | null> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    return readRecordText(text, this.path);
  }

  /** Move an unreadable file aside for forensics, so the next save starts clean. */
  async quarantine(): Promise<string | null> {
    const aside = `${this.path}.corrupt-${Date.now()}`;
    try {
      await rename(this.path, aside);
      return aside;
    } catch {
      return null;
    }
  }

  save(record: DurableRecord): Promise<void> {
    // Serialize now: the caller may keep mutating its own copy while the write is queued.
    const text = recordText(record);
    return new Promise<void>((resolve, reject) => {
      if (this.queued) {
        this.queued.text = text;
        this.queued.waiters.push({ resolve, reject });
        return;
      }
      const batch = { text, waiters: [{ resolve, reject }] };
      this.queued = batch;
      this.writing = this.writing.then(async () => {
        this.queued = null;
        try {
          this.guard();
          await writeFileAtomic(this.path, batch.text, this.hooks);
          for (const w of batch.waiters) w.resolve();
        } catch (err) {
          for (const w of batch.waiters) w.reject(err);
        }
      });
    });
  }
}
