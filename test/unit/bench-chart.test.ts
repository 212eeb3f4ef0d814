import { describe, expect, it } from 'vitest';
import { ratioBars, ratioChartSvg } from '../../bench/lib/chart';
import type { ScenarioResult } from '../../bench/lib/types';

const result = (name: string, data: Record<string, number>): ScenarioResult => ({ name, title: name, method: [], figures: [], evidence: [], data });

describe('the benchmark ratio chart', () => {
  it('divides each hub figure by its same-run baseline (throughput inverted to time per frame), with the ratio targets', () => {
    const bars = ratioBars([
      result('handshake', { hubMedianMs: 20, echoMs: 2 }),
      result('ingest', { hubFps: 25_000, echoFps: 50_000, multiFps: 10_000, multiEchoFps: 40_000 }),
      result('desired', { hubMs: 3, sioDbMs: 4, hubBurstMs: 3_000, sioDbBurstMs: 2_000 }),
    ]);
    expect(bars.map((b) => [b.label, b.ratio, b.target])).toEqual([
      ['connect → welcome', 10, undefined],
      ['ingest, one session (time per frame)', 2, 1 / 0.65],
      ['ingest, 50 sessions (time per frame)', 4, 1 / 0.55],
      ['single desired change', 0.75, 1],
      ['burst of 1,000 single PUTs', 1.5, 1],
    ]);
  });

  it('leaves out a figure whose hub value or baseline was not measured', () => {
    const bars = ratioBars([result('desired', { hubMs: 3, sioDbMs: Number.NaN, hubBulkMs: 100 }), result('resync', { totalMs: 900, pgAloneMs: 0 })]);
    expect(bars).toEqual([]);
  });

  it('draws one bar per figure, coloured by its target, on a log axis through 1×, with every label escaped', () => {
    const svg = ratioChartSvg(
      [
        { label: 'fast <one>', ratio: 0.5, baseline: 'a & b', target: 1 },
        { label: 'slow', ratio: 8, baseline: 'c', target: 1 },
        { label: 'untargeted', ratio: 2, baseline: 'd' },
      ],
      'T',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('fast &lt;one&gt;');
    expect(svg).toContain('a &amp; b');
    expect(svg).not.toContain('<one>');
    const bars = [...svg.matchAll(/<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*fill="(#[0-9a-f]+)"/g)].map((m) => ({ x: Number(m[1]), w: Number(m[2]), fill: m[3] }));
    expect(bars.map((b) => b.fill)).toEqual(['#3a9d5d', '#d0703c', '#6b8fc7']);
    // Log scale: 8× is three doublings right of 1×, 0.5× one doubling left, 2× one right.
    const one = bars[0]!.x + bars[0]!.w;
    expect(bars[1]!.x).toBeCloseTo(one, 0);
    expect(bars[1]!.w / bars[0]!.w).toBeCloseTo(3, 1);
    expect(bars[2]!.w / bars[0]!.w).toBeCloseTo(1, 1);
    expect(svg).toContain('>1×</text>');
  });
});
