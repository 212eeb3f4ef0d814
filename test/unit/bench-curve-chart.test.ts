import { describe, expect, it } from 'vitest';
import { latencyCurveSvg, type Series } from '../../bench/lib/curve-chart';

const series = (label: string, points: [number, number][], dash = ''): Series => ({ label, color: '#123456', dash, points });
const attrs = (svg: string, tag: string, attr: string): number[] =>
  [...svg.matchAll(new RegExp(`<${tag} [^>]*${attr}="([-\\d.]+)"`, 'g'))].map((m) => Number(m[1]));

describe('the ingest latency curve', () => {
  it('draws one line per series with a dot per point, and a legend entry with its label escaped', () => {
    const svg = latencyCurveSvg(60_000, [
      series('hub <p50>', [[5_000, 4], [20_000, 9], [45_000, 220]]),
      series('echo & p99', [[5_000, 3], [73_834, 190]], '6 4'),
    ]);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg.match(/<circle /g)).toHaveLength(5);
    expect(svg).toContain('hub &lt;p50&gt;');
    expect(svg).toContain('echo &amp; p99');
    expect(svg).not.toContain('<p50>');
    expect(svg).toContain('stroke-dasharray="6 4"');
  });

  it('spans the latencies in whole decades on a log axis, and the rates in 10k steps up to the highest or the target', () => {
    const svg = latencyCurveSvg(60_000, [series('a', [[5_000, 0.3], [73_834, 250]])]);
    for (const tick of ['0.1 ms', '1 ms', '10 ms', '100 ms', '1000 ms']) expect(svg).toContain(`>${tick}</text>`);
    expect(svg).not.toContain('>0.01 ms<');
    expect(svg).not.toContain('>10000 ms<');
    expect(svg).toContain('>80k</text>');
    expect(svg).not.toContain('>90k</text>');
    expect(svg).toContain('target 60k');
    // Below the target every rate still reaches it.
    expect(latencyCurveSvg(60_000, [series('b', [[5_000, 2], [20_000, 3]])])).toContain('>60k</text>');
  });

  it('places a higher latency higher up and a higher rate further right, evenly in log and linear steps', () => {
    const svg = latencyCurveSvg(60_000, [series('a', [[10_000, 1], [20_000, 10], [40_000, 100]])]);
    const cx = attrs(svg, 'circle', 'cx');
    const cy = attrs(svg, 'circle', 'cy');
    expect(cx).toHaveLength(3);
    expect(cx[1]! - cx[0]!).toBeCloseTo((cx[2]! - cx[1]!) / 2, 0);
    expect(cy[0]! - cy[1]!).toBeGreaterThan(0);
    expect(cy[0]! - cy[1]!).toBeCloseTo(cy[1]! - cy[2]!, 0);
  });

  it('draws one decade when every latency is the same power of ten, and refuses a curve with no point', () => {
    const svg = latencyCurveSvg(60_000, [series('flat', [[1_000, 1], [2_000, 1]])]);
    expect(svg).not.toContain('NaN');
    expect(svg).toContain('>1 ms</text>');
    expect(svg).toContain('>10 ms</text>');
    expect(() => latencyCurveSvg(60_000, [series('none', [])])).toThrow(/no point/);
  });
});
