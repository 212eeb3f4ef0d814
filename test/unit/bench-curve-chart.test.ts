import { describe, expect, it } from 'vitest';
import { curveSvg, type CurveOptions, type Series } from '../../bench/lib/curve-chart';

const series = (label: string, points: [number, number][], dash = '', open?: [number, number][]): Series => ({ label, color: '#123456', dash, points, ...(open ? { open } : {}) });
const latency: CurveOptions = { title: 'latency <t>', yUnit: 'ms', targetFps: 60_000 };
const attrs = (svg: string, tag: string, attr: string): number[] =>
  [...svg.matchAll(new RegExp(`<${tag} [^>]*${attr}="([-\\d.]+)"`, 'g'))].map((m) => Number(m[1]));

describe('the ingest curves', () => {
  it('draws one line per series with a dot per point, unpaced points hollow and unjoined, and a legend entry and title escaped', () => {
    const svg = curveSvg(latency, [
      series('hub <p50>', [[5_000, 4], [20_000, 9], [45_000, 220]], '', [[40_000, 250]]),
      series('echo & p99', [[5_000, 3], [73_834, 190]], '6 4'),
    ]);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg.match(/<circle /g)).toHaveLength(6);
    expect(svg.match(/<circle [^>]*fill="#fff"/g)).toHaveLength(1);
    // The hub's line joins its three paced points only.
    expect(svg.match(/<path d="M[^"]*"/)?.[0].split(' L')).toHaveLength(3);
    expect(svg).toContain('hub &lt;p50&gt;');
    expect(svg).toContain('echo &amp; p99');
    expect(svg).toContain('latency &lt;t&gt;');
    expect(svg).not.toContain('<p50>');
    expect(svg).toContain('stroke-dasharray="6 4"');
  });

  it('spans the values in whole decades on a log axis, and the rates in 10k steps up to the highest or the target', () => {
    const svg = curveSvg(latency, [series('a', [[5_000, 0.3], [73_834, 250]])]);
    for (const tick of ['0.1 ms', '1 ms', '10 ms', '100 ms', '1000 ms']) expect(svg).toContain(`>${tick}</text>`);
    expect(svg).not.toContain('>0.01 ms<');
    expect(svg).not.toContain('>10000 ms<');
    expect(svg).toContain('>80k</text>');
    expect(svg).not.toContain('>90k</text>');
    expect(svg).toContain('target 60k');
    // Below the target every rate still reaches it; no target, no line.
    expect(curveSvg(latency, [series('b', [[5_000, 2], [20_000, 3]])])).toContain('>70k</text>');
    expect(curveSvg({ title: 't', yUnit: 'µs' }, [series('b', [[5_000, 2]])])).not.toContain('target');
  });

  it('places a higher value higher up and a higher rate further right, evenly in log and linear steps', () => {
    const svg = curveSvg(latency, [series('a', [[10_000, 1], [20_000, 10], [40_000, 100]])]);
    const cx = attrs(svg, 'circle', 'cx');
    const cy = attrs(svg, 'circle', 'cy');
    expect(cx).toHaveLength(3);
    expect(cx[1]! - cx[0]!).toBeCloseTo((cx[2]! - cx[1]!) / 2, 0);
    expect(cy[0]! - cy[1]!).toBeGreaterThan(0);
    expect(cy[0]! - cy[1]!).toBeCloseTo(cy[1]! - cy[2]!, 0);
  });

  it('on a log rate axis, spaces decades of rate evenly, from the decade below the slowest point', () => {
    const svg = curveSvg({ title: 'cpu', yUnit: 'µs', xLog: true }, [series('a', [[100, 1_000], [1_000, 100], [10_000, 10]])]);
    for (const tick of ['>100</text>', '>1k</text>', '>10k</text>', '>100k</text>']) expect(svg).toContain(tick);
    expect(svg).toContain('>1000 µs</text>');
    const cx = attrs(svg, 'circle', 'cx');
    expect(cx[1]! - cx[0]!).toBeCloseTo(cx[2]! - cx[1]!, 0);
    expect(svg).toContain('(log)');
  });

  it('draws one decade when every value is the same power of ten, and refuses a curve with no point', () => {
    const svg = curveSvg(latency, [series('flat', [[1_000, 1], [2_000, 1]])]);
    expect(svg).not.toContain('NaN');
    expect(svg).toContain('>1 ms</text>');
    expect(svg).toContain('>10 ms</text>');
    expect(() => curveSvg(latency, [series('none', [])])).toThrow(/no point/);
  });
});
