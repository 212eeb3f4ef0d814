import { describe, expect, it } from 'vitest';
import { spanChartSvg } from '../../bench/lib/span-chart';

const chart = {
  title: 'A & B',
  subtitle: 'spans <ms>',
  spans: ['first', 'second', 'third'],
  runs: [
    { label: 'disk', ms: [1, 2, 0.5] },
    { label: 'tmpfs', ms: [1, 2, 0] },
  ],
};

describe('the span chart', () => {
  it('draws one segment per span per run, laid end to end, and the run’s sum after it', () => {
    const svg = spanChartSvg(chart);
    const segments = [...svg.matchAll(/<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="22" fill="[^"]+"><title>([^<]+)<\/title>/g)];
    expect(segments.map((m) => m[3])).toEqual([
      'disk: first: 1.000 ms',
      'disk: second: 2.000 ms',
      'disk: third: 0.500 ms',
      'tmpfs: first: 1.000 ms',
      'tmpfs: second: 2.000 ms',
      'tmpfs: third: 0.000 ms',
    ]);
    // Each segment starts where the one before it ended.
    const disk = segments.slice(0, 3).map((m) => [Number(m[1]), Number(m[2])] as const);
    expect(disk[1]?.[0]).toBeCloseTo((disk[0]?.[0] ?? 0) + (disk[0]?.[1] ?? 0), 0);
    expect(disk[2]?.[0]).toBeCloseTo((disk[1]?.[0] ?? 0) + (disk[1]?.[1] ?? 0), 0);
    // The 2 ms segment is twice the 1 ms one.
    expect((disk[1]?.[1] ?? 0) / (disk[0]?.[1] ?? 1)).toBeCloseTo(2, 1);
    expect(svg).toContain('>3.50 ms</text>');
    expect(svg).toContain('>3.00 ms</text>');
  });

  it('escapes its text and names every span in the legend', () => {
    const svg = spanChartSvg(chart);
    expect(svg).toContain('A &amp; B');
    expect(svg).toContain('spans &lt;ms&gt;');
    for (const s of chart.spans) expect(svg).toContain(`>${s}</text>`);
  });

  it('refuses a run without one figure per span', () => {
    expect(() => spanChartSvg({ ...chart, runs: [{ label: 'short', ms: [1, 2] }] })).toThrow(/one figure per span/);
  });
});
