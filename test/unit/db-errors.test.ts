import { describe, expect, it } from 'vitest';
import { classifyDbError, describeError } from '../../src/hub/db/errors';

function pgError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

describe('database error classification (DESIGN decision 5: unsure means transient)', () => {
  it('data errors (classes 21, 22, 23) are permanent: a replay could never succeed', () => {
    expect(classifyDbError(pgError('22P02', 'invalid input syntax for type uuid'))).toBe('permanent');
    expect(classifyDbError(pgError('23505', 'duplicate key value'))).toBe('permanent');
    expect(classifyDbError(pgError('21000', 'cardinality violation'))).toBe('permanent');
  });

  it("the database's condition is transient: serialization, lock, deadlock, shutdown, timeout", () => {
    for (const code of ['40001', '40P01', '55P03', '57P01', '57014', '53300', '08006']) {
      expect(classifyDbError(pgError(code, 'x'))).toBe('transient');
    }
  });

  it('anything without a SQLSTATE (socket errors, timeouts, unknown throwables) is transient', () => {
    expect(classifyDbError(new Error('[object ErrorEvent]'))).toBe('transient');
    expect(classifyDbError({ type: 'error' })).toBe('transient');
    expect(classifyDbError('boom')).toBe('transient');
    expect(classifyDbError(pgError('not-a-state', 'x'))).toBe('transient');
  });
});

describe('describeError (what the logs say)', () => {
  it('prefixes the SQLSTATE', () => {
    expect(describeError(pgError('23505', 'duplicate key value'))).toBe('23505: duplicate key value');
  });

  it("names a socket failure instead of the driver's stringified ErrorEvent", () => {
    expect(describeError(new Error('[object ErrorEvent]'))).toBe('database socket error (connection refused or lost)');
  });

  it('digs the message out of event-shaped errors', () => {
    expect(describeError({ message: 'connect ECONNREFUSED' })).toBe('connect ECONNREFUSED');
    expect(describeError({ error: new Error('socket hang up') })).toBe('socket hang up');
    expect(describeError({ type: 'close' })).toBe('close event');
    expect(describeError(42)).toBe('42');
  });
});
