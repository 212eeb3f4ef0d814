/**
 * Property tests of the sequencing engine: a sender and a receiver joined by a link that loses
 * everything in flight when it drops, or loses or repeats a single frame, with handlers that fail
 * transiently or permanently, and reconnects that resume (or fall back to a fresh session when
 * the replay buffer has moved on).
 *
 * The command lists are generated at full length (`size: 'max'`): at fast-check's default size
 * they stayed under about a dozen commands, never overflowed the 12-frame buffer (no fresh
 * session) and, with a link that only ever lost everything, never produced a gap or a duplicate.
 * `reaches every case` below keeps it so.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InboundSequencer, MemoryReplayStore, OutboundSequencer } from '../../../src/protocol';

type Outcome = 'ok' | 'transient' | 'poison';
type Cmd =
  | { t: 'send' }
  | { t: 'deliver'; outcome: Outcome }
  | { t: 'retry' }
  | { t: 'ack' }
  | { t: 'drop' }
  | { t: 'lose-one' }
  | { t: 'dup' }
  | { t: 'reconnect' };

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 5, arbitrary: fc.constant<Cmd>({ t: 'send' }) },
  {
    weight: 6,
    arbitrary: fc
      .constantFrom<Outcome>('ok', 'ok', 'ok', 'transient', 'poison')
      .map((outcome): Cmd => ({ t: 'deliver', outcome })),
  },
  { weight: 1, arbitrary: fc.constant<Cmd>({ t: 'retry' }) },
  { weight: 2, arbitrary: fc.constant<Cmd>({ t: 'ack' }) },
  { weight: 1, arbitrary: fc.constant<Cmd>({ t: 'drop' }) },
  { weight: 1, arbitrary: fc.constant<Cmd>({ t: 'lose-one' }) },
  { weight: 1, arbitrary: fc.constant<Cmd>({ t: 'dup' }) },
  { weight: 2, arbitrary: fc.constant<Cmd>({ t: 'reconnect' }) },
);

/** The spec's failure mode: a receiver that keeps its higher expectation across a resume. */
class NoRewindInbound extends InboundSequencer {
  override rewind(): void {}
}

interface Sim {
  sender: OutboundSequencer;
  receiver: InboundSequencer;
  wire: number[];
  connected: boolean;
  /** Per session epoch: what the receiver's application has applied or rejected as poison. */
  applied: Set<number>;
  poisoned: Set<number>;
  failing: Set<number>;
  freshSessions: number;
  /** What the run went through, so a test can check that the generator reaches every case. */
  seen: { gaps: number; duplicates: number; resumes: number };
}

function makeSim(receiver: InboundSequencer): Sim {
  return {
    sender: new OutboundSequencer(new MemoryReplayStore(), { frames: 12, bytes: 1 << 20 }),
    receiver,
    wire: [],
    connected: true,
    applied: new Set(),
    poisoned: new Set(),
    failing: new Set(),
    freshSessions: 0,
    seen: { gaps: 0, duplicates: 0, resumes: 0 },
  };
}

function handle(sim: Sim, seq: number, outcome: Outcome): void {
  if (outcome === 'ok') {
    sim.applied.add(seq);
    sim.failing.delete(seq);
    sim.receiver.settle(seq, 'applied');
  } else if (outcome === 'poison') {
    sim.poisoned.add(seq);
    sim.receiver.settle(seq, 'dropped');
  } else {
    sim.failing.add(seq);
    sim.receiver.settle(seq, 'failed');
  }
}

function drop(sim: Sim): void {
  sim.connected = false;
  sim.wire = [];
}

function reconnect(sim: Sim): void {
  sim.connected = true;
  // hello.resume_from is the receiver's durable contiguous cursor.
  const plan = sim.sender.planResume(sim.receiver.cursor);
  if (plan.ok) {
    sim.seen.resumes++;
    sim.receiver.rewind();
    sim.failing.clear();
    sim.wire = plan.replay.map((e) => e.seq);
  } else {
    // full_resync: both directions restart at 1, both buffers discarded; the resync supersedes.
    sim.sender.reset();
    sim.receiver.reset();
    sim.applied.clear();
    sim.poisoned.clear();
    sim.failing.clear();
    sim.wire = [];
    sim.freshSessions++;
  }
}

function step(sim: Sim, cmd: Cmd): void {
  switch (cmd.t) {
    case 'send': {
      const { seq } = sim.sender.stamp((s) => `frame ${s}`);
      if (sim.connected) sim.wire.push(seq);
      return;
    }
    case 'deliver': {
      if (!sim.connected) return;
      const seq = sim.wire.shift();
      if (seq === undefined) return;
      const cursor = sim.receiver.cursor;
      const arrival = sim.receiver.arrive(seq);
      if (arrival === 'gap') {
        // A gap closes the connection; it is never accepted as a hole.
        sim.seen.gaps++;
        drop(sim);
      } else if (arrival === 'duplicate') {
        sim.seen.duplicates++;
      } else {
        // Nothing at or under the cursor is applied again: it was processed and acknowledged.
        if (seq <= cursor) throw new Error(`accepted ${seq} at or under the cursor ${cursor}`);
        handle(sim, seq, cmd.outcome);
      }
      return;
    }
    case 'lose-one': {
      // One frame lost in flight (the frames behind it still arrive).
      if (sim.connected && sim.wire.length > 0) sim.wire.shift();
      return;
    }
    case 'dup': {
      // One frame delivered twice.
      const head = sim.wire[0];
      if (sim.connected && head !== undefined) sim.wire.unshift(head);
      return;
    }
    case 'retry': {
      const [oldest] = [...sim.failing].sort((a, b) => a - b);
      if (oldest !== undefined) handle(sim, oldest, 'ok');
      return;
    }
    case 'ack': {
      if (!sim.connected) return;
      const verdict = sim.sender.acknowledge(sim.receiver.cursor);
      if (verdict === 'invalid') throw new Error('receiver acked past what was sent');
      return;
    }
    case 'drop':
      drop(sim);
      return;
    case 'reconnect':
      if (!sim.connected) reconnect(sim);
      return;
  }
}

function checkSafety(sim: Sim): void {
  const cursor = sim.receiver.cursor;
  for (let s = 1; s <= cursor; s++) {
    // Nothing acked is lost: every seq under the cursor was applied or deliberately rejected.
    if (!sim.applied.has(s) && !sim.poisoned.has(s)) throw new Error(`cursor ${cursor} covers unapplied ${s}`);
    // A hole is never acknowledged past.
    if (sim.failing.has(s)) throw new Error(`cursor ${cursor} passed hole ${s}`);
  }
  if (sim.sender.peerAck > cursor) throw new Error('sender released frames the receiver never processed');
}

/** Heal the link and run it clean: everything sent must end up processed and released. */
function settleCleanly(sim: Sim): void {
  drop(sim);
  reconnect(sim);
  for (let round = 0; round < 4 && sim.wire.length > 0; round++) {
    while (sim.wire.length > 0) step(sim, { t: 'deliver', outcome: 'ok' });
    step(sim, { t: 'ack' });
  }
  step(sim, { t: 'ack' });
  if (sim.receiver.cursor !== sim.sender.lastSent) {
    throw new Error(`wedged: cursor ${sim.receiver.cursor}, sent ${sim.sender.lastSent}`);
  }
  if (sim.sender.unacked !== 0) throw new Error(`${sim.sender.unacked} frames never released`);
}

const cmdsArb = fc.array(cmdArb, { minLength: 1, maxLength: 250, size: 'max' });

function run(makeReceiver: () => InboundSequencer, cmds: Cmd[]): Sim {
  const sim = makeSim(makeReceiver());
  for (const cmd of cmds) {
    step(sim, cmd);
    checkSafety(sim);
  }
  settleCleanly(sim);
  checkSafety(sim);
  return sim;
}

function property(makeReceiver: () => InboundSequencer) {
  return fc.property(cmdsArb, (cmds) => {
    run(makeReceiver, cmds);
  });
}

describe('sequencing under random loss, reconnects, failed and poison handlers', () => {
  it('nothing acked is lost, the cursor never passes a hole, and a resume never wedges', () => {
    fc.assert(property(() => new InboundSequencer()), { numRuns: 1500 });
  });

  it('the spec failure mode is caught: a receiver that does not rewind its expectation on resume wedges', () => {
    const result = fc.check(property(() => new NoRewindInbound()), { numRuns: 1500 });
    expect(result.failed).toBe(true);
    expect(String(result.errorInstance)).toMatch(/wedged/);
  });

  it('reaches every case: fresh sessions, resumes, gaps and duplicates all occur in the generated runs', () => {
    const total = { fresh: 0, resumes: 0, gaps: 0, duplicates: 0, longest: 0 };
    for (const cmds of fc.sample(cmdsArb, { numRuns: 200, seed: 7 })) {
      const sim = run(() => new InboundSequencer(), cmds);
      total.fresh += sim.freshSessions;
      total.resumes += sim.seen.resumes;
      total.gaps += sim.seen.gaps;
      total.duplicates += sim.seen.duplicates;
      total.longest = Math.max(total.longest, cmds.length);
    }
    expect(total.longest).toBeGreaterThan(100);
    // settleCleanly's own reconnect counts once per run: more than that means runs resumed mid-way.
    expect(total.resumes).toBeGreaterThan(200);
    expect(total.fresh).toBeGreaterThan(0);
    expect(total.gaps).toBeGreaterThan(0);
    expect(total.duplicates).toBeGreaterThan(0);
  });

  it('overflowing the replay buffer forces a fresh session instead of a silent loss', () => {
    const sim = makeSim(new InboundSequencer());
    drop(sim);
    for (let i = 0; i < 20; i++) step(sim, { t: 'send' });
    reconnect(sim);
    expect(sim.freshSessions).toBe(1);
    expect(sim.sender.nextSeq).toBe(1);
    expect(sim.receiver.expected).toBe(1);
  });
});
