import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { compareRows, TRACKED, verdict, type BeforeFile } from '../../bench/lib/compare';
import type { ScenarioResult } from '../../bench/lib/types';

const before: BeforeFile = {
  mainCommit: 'main0',
  measuredCommit: 'meas0',
  measuredOn: '2026-11-29',
  figures: {
    'desired.single': { value: 4.2, note: '1.3× Socket.IO + Postgres' },
    'desired.bulk': { value: null, note: 'no such endpoint' },
    'ingest.one': { value: 45_200 },
    'resume.both': { value: 78.8 },
    'ingest.multi': { value: 43_394 },
  },
};

const result = (name: string, data: Record<string, number>): ScenarioResult => ({ name, title: name, method: [], figures: [], evidence: [], data });

describe('bench before/after comparison', () => {
  it('flags a figure only when it is worse than before by more than the tolerance, in its own direction', () => {
    expect(verdict(100, 95, 'lower')).toBe('better');
    expect(verdict(100, 110, 'lower')).toBe('within');
    expect(verdict(100, 110.1, 'lower')).toBe('worse');
    expect(verdict(100, 105, 'higher')).toBe('better');
    expect(verdict(100, 90, 'higher')).toBe('within');
    expect(verdict(100, 89.9, 'higher')).toBe('worse');
    expect(verdict(null, 5, 'lower')).toBe('new');
    expect(verdict(5, undefined, 'lower')).toBe('missing');
  });

  it('judges a target stated against Socket.IO + Postgres by that baseline in the same run', () => {
    const rows = compareRows(
      [result('desired', { hubMs: 3.0, sioDbMs: 3.1, hubBulkMs: 160 }), result('ingest', { hubFps: 61_000, fraction: 0.6, echoFps: 100_000 })],
      before,
    );
    const single = rows.find((r) => r.id === 'desired.single');
    expect(single).toMatchObject({ issue: 13, met: true, verdict: 'better' });
    expect(single?.before).toContain('4.20 ms');
    expect(single?.target).toContain('3.10 ms this run');
    expect(rows.find((r) => r.id === 'desired.bulk')).toMatchObject({ before: 'no such endpoint', met: false, verdict: 'new' });
    // Both halves of the ingest target must hold: 61,000 frames/s at 60% of the ceiling is not enough.
    expect(rows.find((r) => r.id === 'ingest.one')).toMatchObject({ met: false, verdict: 'better' });
  });

  it('reports a figure this run did not measure as such, with no verdict on its target', () => {
    const rows = compareRows([result('resume', { totalMs: 90 })], before);
    expect(rows.find((r) => r.id === 'resume.both')).toMatchObject({ verdict: 'worse' });
    const storm = rows.find((r) => r.id === 'handshake.storm');
    expect(storm).toMatchObject({ after: 'not measured', verdict: 'missing', target: '≤ 6 s' });
    expect(storm?.met).toBeUndefined();
  });

  it('has a before for every tracked figure in bench/before.json, and nothing it does not track', () => {
    const file = JSON.parse(readFileSync(new URL('../../bench/before.json', import.meta.url), 'utf8')) as BeforeFile;
    expect(Object.keys(file.figures).sort()).toEqual(TRACKED.map((t) => t.id).sort());
  });
});
