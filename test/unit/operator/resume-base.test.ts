import { describe, expect, it } from 'vitest';
import { emptyRecord, type DurableRecord } from '../../../src/operator/cursor-store';
import type { LogRecovery } from '../../../src/operator/outbound-log';
import { decideResumeBase } from '../../../src/operator/resume-base';

const rec = (o: Partial<DurableRecord>): DurableRecord => ({ ...emptyRecord(), ...o });
const memory = { durable: false, recovery: { session: null, intact: true, problem: null, released: 0, lastSeq: 0, lostThrough: 0, discardedBytes: 0 } };
const log = (r: Partial<LogRecovery>) => ({
  durable: true,
  recovery: { session: 'S1', intact: true, problem: null, released: 0, lastSeq: 0, lostThrough: 0, discardedBytes: 0, ...r },
});

describe('what a starting operator may claim (hello.lossy)', () => {
  it('first start: no session, not lossy, no resync of its own (the fresh session brings one)', () => {
    expect(decideResumeBase(emptyRecord(), memory)).toMatchObject({ lossy: false, resyncAfterOpen: false });
  });

  it('in-memory buffer after a clean stop with everything acknowledged: resumes, and streams its observed snapshot (what the last process never reported)', () => {
    const r = rec({ sessionId: 'S1', clean: true, outbound: { nextSeq: 11, peerAck: 10, lostThrough: 0 } });
    expect(decideResumeBase(r, memory)).toMatchObject({ lossy: false, outbound: { nextSeq: 11 }, resyncAfterOpen: true });
    expect(decideResumeBase(r, log({ lastSeq: 10, released: 10 }))).toMatchObject({ lossy: false, resyncAfterOpen: true });
  });

  it('in-memory buffer after a crash, or a stop that left frames unacknowledged: lossy', () => {
    const crashed = rec({ sessionId: 'S1', clean: false, outbound: { nextSeq: 11, peerAck: 10, lostThrough: 0 } });
    expect(decideResumeBase(crashed, memory)).toMatchObject({ lossy: true, resyncAfterOpen: true });
    const undrained = rec({ sessionId: 'S1', clean: true, outbound: { nextSeq: 11, peerAck: 7, lostThrough: 0 } });
    expect(decideResumeBase(undrained, memory).lossy).toBe(true);
  });

  it('durable log of the same session after a crash: resumes, numbering from the log, and resyncs observed state', () => {
    const r = rec({ sessionId: 'S1', clean: false, outbound: { nextSeq: 40, peerAck: 12, lostThrough: 0 } });
    // The record was saved with seqs the crash kept off the socket (38, 39): the log decides.
    expect(decideResumeBase(r, log({ released: 5, lastSeq: 37 }))).toMatchObject({
      lossy: false,
      keepBuffer: true,
      outbound: { nextSeq: 38, peerAck: 12 },
      resyncAfterOpen: true,
    });
  });

  it('a session found lossy at runtime, with its durable log intact: lossy, and the log kept to be read (its events counted lost, its removals sent again by the fresh session), not cleared', () => {
    // Found by a read-only review: the log was cleared, so after a restart the fresh session saw
    // no unacknowledged frame, counted no lost event and sent no removal again.
    const r = rec({ sessionId: 'S1', lossy: true, outbound: { nextSeq: 40, peerAck: 12, lostThrough: 0 } });
    expect(decideResumeBase(r, log({ released: 5, lastSeq: 37 }))).toMatchObject({
      lossy: true,
      keepBuffer: true,
      outbound: { nextSeq: 38, peerAck: 12 },
      problem: expect.stringMatching(/could not be resumed/),
    });
    // A log that cannot vouch for itself, or an in-memory one, is still cleared.
    expect(decideResumeBase(r, log({ intact: false, problem: 'bad' }))).toMatchObject({ lossy: true, keepBuffer: false });
    expect(decideResumeBase(r, memory)).toMatchObject({ lossy: true, keepBuffer: false });
  });

  it('durable log that is corrupt or belongs to another session: lossy', () => {
    const r = rec({ sessionId: 'S1' });
    expect(decideResumeBase(r, log({ intact: false, problem: 'bad' }))).toMatchObject({ lossy: true, keepBuffer: false, problem: 'bad' });
    expect(decideResumeBase(r, log({ session: 'S0' }))).toMatchObject({ lossy: true, problem: expect.stringMatching(/another session/) });
    expect(decideResumeBase(r, log({ session: null }))).toMatchObject({ lossy: true });
  });

  it('a record noting an open hub snapshot is lossy whatever the buffer says: the half it saw cannot be pruned against', () => {
    const clean = rec({ sessionId: 'S1', clean: true, outbound: { nextSeq: 11, peerAck: 10, lostThrough: 0 }, hubSnapshotOpen: true });
    expect(decideResumeBase(clean, memory)).toMatchObject({ lossy: true, snapshotInterrupted: true });
    expect(decideResumeBase(rec({ sessionId: 'S1', hubSnapshotOpen: true }), log({ lastSeq: 3 }))).toMatchObject({ lossy: true, snapshotInterrupted: true, keepBuffer: true });
    // Without a session there is nothing to resume, lossy or not.
    expect(decideResumeBase(rec({ hubSnapshotOpen: true }), memory)).toMatchObject({ lossy: false, snapshotInterrupted: false });
    expect(decideResumeBase({ ...clean, hubSnapshotOpen: false }, memory)).toMatchObject({ lossy: false, snapshotInterrupted: false });
  });
});
