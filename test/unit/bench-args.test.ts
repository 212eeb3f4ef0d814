/**
 * The benchmark's command line: a value its flag cannot take is refused before anything starts.
 * `--reps three` used to become NaN repetitions: the run started, repeated nothing and reported
 * no figure.
 */
import { describe, expect, it } from 'vitest';
import { parseBenchArgs } from '../../bench/lib/args';

const SCENARIOS = ['handshake', 'ingest', 'desired'];

describe('npm run bench arguments', () => {
  it('--reps takes a whole number of at least 1, and refuses anything else by name', () => {
    expect(parseBenchArgs(['--reps', '5'], SCENARIOS)).toMatchObject({ reps: 5 });
    for (const bad of ['three', '0', '-1', '2.5', '', ' ', '1e3', 'NaN', 'Infinity']) {
      expect(() => parseBenchArgs(['--reps', bad], SCENARIOS), bad).toThrow(/--reps needs a whole number of at least 1/);
    }
    expect(() => parseBenchArgs(['--reps'], SCENARIOS)).toThrow(/--reps needs a value/);
  });

  it('--quick repeats once unless --reps says otherwise; the default is 3', () => {
    expect(parseBenchArgs([], SCENARIOS)).toMatchObject({ reps: 3, quick: false });
    expect(parseBenchArgs(['--quick'], SCENARIOS)).toMatchObject({ reps: 1, quick: true });
    expect(parseBenchArgs(['--quick', '--reps', '2'], SCENARIOS)).toMatchObject({ reps: 2 });
    expect(parseBenchArgs(['--reps', '2', '--quick'], SCENARIOS)).toMatchObject({ reps: 2 });
  });

  it('an unknown scenario or argument is refused, naming it', () => {
    expect(() => parseBenchArgs(['--only', 'ingest,fleeet'], SCENARIOS)).toThrow(/unknown scenario\(s\): fleeet/);
    expect(() => parseBenchArgs(['--repz', '2'], SCENARIOS)).toThrow(/unknown argument --repz/);
    expect(parseBenchArgs(['--help'], SCENARIOS)).toBe('help');
    expect(parseBenchArgs(['--var', 'A=b=c', '--only', 'ingest, desired'], SCENARIOS)).toMatchObject({ vars: { A: 'b=c' }, only: ['ingest', 'desired'] });
  });
});
