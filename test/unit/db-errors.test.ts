import { describe, expect, it } from 'vitest';
import { classifyDbError, describeError, failureKind, failureLine } from '../../src/hub/db/errors';
import { GatewayQueryError, mayHaveCommitted } from '../../src/hub/db/gateway-client';
import { ConnectionLostError, lostUnder } from '../../src/hub/pg-errors';

function pgError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/** What a gateway shard relayed, rethrown as the Worker and the session objects rethrow it: message, SQLSTATE, name. */
function relayed(message: string, code: string | null, name: string): Error {
  return new GatewayQueryError(message, code, name);
}

describe('database error classification (DESIGN decision 5: unsure means transient)', () => {
  it('data errors (classes 21, 22, 23, and 54: a program limit the data ran into) are permanent: a replay could never succeed', () => {
    expect(classifyDbError(pgError('54000', 'total size of jsonb array elements exceeds the maximum of 268435455 bytes'))).toBe('permanent');
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

describe('failureKind (an outage or a fault, for the log of a failed lookup)', () => {
  it("the database's condition and the way to it are an outage", () => {
    for (const code of ['08006', '57P01', '53300', '40001', '55P03', '57014']) expect(failureKind(pgError(code, 'x'))).toBe('outage');
    expect(failureKind(new Error('[object ErrorEvent]'))).toBe('outage');
    expect(failureKind(new Error('Network connection lost.'))).toBe('outage');
    expect(failureKind(relayed('database gateway did not answer in 7000 ms', null, 'QueryTimeoutError'))).toBe('outage');
    expect(failureKind({ type: 'error' })).toBe('outage');
  });

  it('a statement the database refused for what it says is a fault: a missing table or column, syntax, permission', () => {
    for (const code of ['42P01', '42703', '42601', '42501', '0A000', '28P01']) expect(failureKind(pgError(code, 'x'))).toBe('fault');
    // Relayed by a gateway shard with its SQLSTATE.
    expect(failureKind(relayed('relation "clusters" does not exist', '42P01', 'error'))).toBe('fault');
  });

  it('a write refused by a read-only database (25006) is a fault; the rest of class 25 is not', () => {
    expect(failureKind(pgError('25006', 'cannot execute INSERT in a read-only transaction'))).toBe('fault');
    expect(failureKind(pgError('25P03', 'terminating connection due to idle-in-transaction timeout'))).toBe('outage');
    expect(classifyDbError(pgError('25006', 'x'))).toBe('transient');
  });

  it('a connection the server refuses for what the URL says keeps its SQLSTATE: a fault, still retried', () => {
    // Pg.connect wraps every connect failure; it used to drop the code, so a role that does not
    // exist was logged "database unavailable" at warn, forever.
    const role = new ConnectionLostError('role "nobody" does not exist', '28000');
    expect(failureKind(role)).toBe('fault');
    expect(classifyDbError(role)).toBe('transient');
    expect(describeError(role)).toBe('28000: role "nobody" does not exist');
    expect(failureKind(new ConnectionLostError('database "nowhere" does not exist', '3D000'))).toBe('fault');
    expect(failureKind(pgError('3D000', 'database "nowhere" does not exist'))).toBe('fault');
    // A connection that never reached the server is an outage, as before.
    expect(failureKind(new ConnectionLostError('[object ErrorEvent]'))).toBe('outage');
    expect(failureKind(new ConnectionLostError('connect ECONNREFUSED', null))).toBe('outage');
  });

  it('a programming error is a fault, thrown here or relayed by name from a gateway shard', () => {
    expect(failureKind(new TypeError("Cannot read properties of undefined (reading 'uid')"))).toBe('fault');
    expect(failureKind(relayed('x is not a function', null, 'TypeError'))).toBe('fault');
    expect(failureKind(relayed("residency check failed: shard outside 'eu'", null, 'ResidencyError'))).toBe('fault');
  });
});

describe('failureLine (what the Worker and the claim log)', () => {
  it('an outage is a warning that says so; a fault is an error that says it is not one', () => {
    expect(failureLine('token lookup', new Error('[object ErrorEvent]'))).toEqual({
      level: 'warn',
      message: 'token lookup failed: database unavailable',
      fields: { error: 'database socket error (connection refused or lost)' },
    });
    expect(failureLine('claim', pgError('42P01', 'relation "clusters" does not exist'))).toEqual({
      level: 'error',
      message: 'claim failed: not an outage (a code or schema fault)',
      fields: { error: '42P01: relation "clusters" does not exist' },
    });
  });

  it('a statement refused for what ran beside it (serialization failure, deadlock, lock timeout) is a warning that says so, not an outage', () => {
    for (const [code, text] of [
      ['40001', 'could not serialize access due to concurrent update'],
      ['40P01', 'deadlock detected'],
      ['55P03', 'canceling statement due to lock timeout'],
    ] as const) {
      expect(failureLine('claim', pgError(code, text))).toEqual({
        level: 'warn',
        message: 'claim failed: conflicted with concurrent work (rolled back whole; safe to retry)',
        fields: { error: `${code}: ${text}` },
      });
    }
  });
});

describe('whether a relayed statement may have committed (mayHaveCommitted)', () => {
  it('only an answer that rules it out says no: the server refused it, or it was never sent', () => {
    expect(mayHaveCommitted(new GatewayQueryError('claim failed (simulated)', '57P01', 'error'))).toBe(false);
    expect(mayHaveCommitted(new GatewayQueryError('the connection was busy for 1000 ms; the statement was not sent', null, 'ConnectionLostError'))).toBe(false);
  });

  it('the runtime refusing an overloaded shard (.overloaded) ran nothing there: not committed', () => {
    const overloaded = Object.assign(new Error('Durable Object is overloaded. Too many requests queued.'), { overloaded: true, retryable: false });
    expect(mayHaveCommitted(overloaded)).toBe(false);
  });

  it('an outcome the gateway did not know, its own silence, or a failed call may have committed', () => {
    expect(mayHaveCommitted(new GatewayQueryError('query exceeded 1500 ms', null, 'QueryTimeoutError', true))).toBe(true);
    expect(mayHaveCommitted(new GatewayQueryError('connection lost under the statement, which may still commit', null, 'ConnectionLostError', true))).toBe(true);
    expect(mayHaveCommitted(new Error('Network connection lost.'))).toBe(true);
  });
});

describe('whether a failed statement was lost under its connection (lostUnder)', () => {
  it("a pooler's connection exception (class 08) is no answer to the statement: lost, its outcome unknown", () => {
    // PgBouncer, as Neon's pooled host runs it, when its server connection dies mid-statement.
    expect(lostUnder(pgError('08P01', 'server conn crashed?'))).toBe(true);
    expect(lostUnder(pgError('08006', 'connection failure'))).toBe(true);
  });

  it("the server's own answer (any other SQLSTATE) is not; a connection that ended with no answer is", () => {
    expect(lostUnder(pgError('23505', 'duplicate key value violates unique constraint'))).toBe(false);
    expect(lostUnder(pgError('57014', 'canceling statement due to statement timeout'))).toBe(false);
    expect(lostUnder(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(lostUnder(new Error('Client was closed and is not queryable'))).toBe(false);
  });
});
