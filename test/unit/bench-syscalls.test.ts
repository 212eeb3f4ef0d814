import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { changesOf, parseStrace } from '../../bench/lib/syscalls';

// Three consecutive single changes (c-9, c-10, c-11) from a real `npx tsx bench/desired-syscalls.ts
// --log FILE` capture of the hub's workerd: PUT reads, the driver's frames to the Postgres proxy and
// its answers, the session's fsync, the frame to the operator and the admin's answer. During the
// third, the operator's ack arrived and its commit (an fsync) ran while the statement was in flight.
const log = readFileSync(path.join(__dirname, 'data', 'desired-change.strace.txt'), 'utf8');

/** Seconds since midnight of a `HH:MM:SS.ffffff` time as strace prints it. */
const at = (t: string) => {
  const [h, m, s] = t.split(':');
  return Number(h) * 3600 + Number(m) * 60 + Number(s);
};

describe('the single change read from a strace log of workerd', () => {
  it('parses every call that names a file descriptor, with its start and duration', () => {
    const calls = parseStrace(log);
    expect(calls).toHaveLength(33);
    expect(calls[0]).toMatchObject({ name: 'read', fd: 49, at: at('01:20:14.312402'), took: expect.closeTo(0.000023, 9) });
    expect(calls.filter((c) => c.name === 'fsync').map((c) => c.fd)).toEqual([46, 46, 46, 46]);
  });

  it('finds each change’s boundaries in order: PUT, statement, ReadyForQuery, the session’s fsync, frame, answer', () => {
    const changes = changesOf(parseStrace(log));
    expect(changes).toHaveLength(3);
    expect(changes[0]).toEqual({
      put: at('01:20:14.312402'),
      stmt: at('01:20:14.313978'),
      ready: at('01:20:14.316104') + 0.000043,
      fsync: at('01:20:14.317756'),
      synced: at('01:20:14.317756') + 0.00038,
      frame: at('01:20:14.318295'),
      answer: at('01:20:14.319100'),
    });
    // The second change's answer from Postgres came in two reads: the ReadyForQuery is the later.
    expect(changes[1]?.ready).toBeCloseTo(at('01:20:14.324662') + 0.000119, 9);
  });

  it('does not take a commit that ran while the statement was in flight for the session’s', () => {
    const third = changesOf(parseStrace(log))[2];
    // The operator's ack was read before the statement went out; its fsync came at 14.333511,
    // before Postgres answered (in one read with the rows, 14.334130).
    expect(third?.stmt).toBeCloseTo(at('01:20:14.331284'), 9);
    expect(third?.ready).toBeCloseTo(at('01:20:14.334130') + 0.000033, 9);
    expect(third?.fsync).toBeCloseTo(at('01:20:14.335814'), 9);
    expect(third?.frame).toBeCloseTo(at('01:20:14.336276'), 9);
  });

  it('leaves out a change whose Postgres answer is not in the log', () => {
    const withoutFirstReady = log
      .split('\n')
      .filter((line) => !line.includes('01:20:14.316104'))
      .join('\n');
    const changes = changesOf(parseStrace(withoutFirstReady));
    expect(changes.map((c) => c.put)).toEqual([at('01:20:14.321037'), at('01:20:14.329712')]);
  });
});
