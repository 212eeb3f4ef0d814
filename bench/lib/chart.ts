/**
 * The picture at the top of bench/RESULTS.md: every figure that has a same-run baseline, as the
 * hub's cost divided by the baseline's (time over time, or the baseline's throughput over the
 * hub's), on one logarithmic axis with 1× marked, and the target where the target is a ratio.
 * Machines differ by a factor of two between runs; these ratios are what stays comparable. Plain
 * SVG text, no dependencies: GitHub and any browser show it, and a diff of it is readable.
 */
import type { ScenarioResult } from './types';

export interface RatioBar {
  label: string;
  /** hub ÷ baseline (> 1: the hub costs more). */
  ratio: number;
  baseline: string;
  /** A target stated as a ratio to this baseline, if any. */
  target?: number;
}

type Data = Record<string, unknown>;
const num = (d: Data | undefined, k: string): number | null => {
  const v = d?.[k];
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : null;
};

/** The bars a run's results support (a figure or baseline that was not measured is left out). */
export function ratioBars(results: readonly ScenarioResult[]): RatioBar[] {
  const data = (name: string) => results.find((r) => r.name === name)?.data as Data | undefined;
  const out: RatioBar[] = [];
  const add = (label: string, hub: number | null, base: number | null, baseline: string, target?: number) => {
    if (hub !== null && base !== null) out.push({ label, ratio: hub / base, baseline, ...(target !== undefined ? { target } : {}) });
  };
  const hs = data('handshake');
  add('connect → welcome', num(hs, 'hubMedianMs'), num(hs, 'echoMs'), 'ws echo');
  const ing = data('ingest');
  // Time per frame: the echo's throughput over the hub's. The target is 65% of the ceiling.
  add('ingest, one session (time per frame)', num(ing, 'echoFps'), num(ing, 'hubFps'), 'ws echo', 1 / 0.65);
  add('ingest, 50 sessions (time per frame)', num(ing, 'multiEchoFps'), num(ing, 'multiFps'), 'ws echo', 1 / 0.55);
  const des = data('desired');
  add('single desired change', num(des, 'hubMs'), num(des, 'sioDbMs'), 'Socket.IO + Postgres', 1);
  add('burst of 1,000 single PUTs', num(des, 'hubBurstMs'), num(des, 'sioDbBurstMs'), 'Socket.IO + Postgres', 1);
  add('1,000 changes in one bulk PUT', num(des, 'hubBulkMs'), num(des, 'sioDbBulkMs'), 'Socket.IO + Postgres, same statement');
  const res = data('resume');
  add('resume: hub → operator replay', num(res, 'downOnlyMs'), num(res, 'sioMs'), 'Socket.IO recovery', 1);
  const rs = data('resync');
  add('full resync, end to end', num(rs, 'totalMs'), num(rs, 'pgAloneMs'), 'Postgres alone, same statements');
  return out;
}

/** Text for SVG: the five characters markup gives meaning to, escaped. */
export const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** The chart as an SVG document. */
export function ratioChartSvg(bars: readonly RatioBar[], title: string): string {
  const labelW = 300;
  const plotW = 420;
  const rowH = 26;
  const top = 46;
  const height = top + bars.length * rowH + 34;
  const width = labelW + plotW + 70;
  const ratios = bars.flatMap((b) => [b.ratio, b.target ?? 1]);
  // A log axis from below the smallest ratio to above the largest, in powers of two around 1×.
  const lo = Math.min(0.5, 2 ** Math.floor(Math.log2(Math.min(...ratios, 1))));
  const hi = Math.max(2, 2 ** Math.ceil(Math.log2(Math.max(...ratios, 1))));
  const x = (r: number) => labelW + ((Math.log2(r) - Math.log2(lo)) / (Math.log2(hi) - Math.log2(lo))) * plotW;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12" role="img" aria-label="${esc(title)}">`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="10" y="20" font-size="14" font-weight="600">${esc(title)}</text>`);
  parts.push(`<text x="10" y="36" fill="#555">hub ÷ its same-run baseline, log scale; left of 1× the hub is faster; ◆ the target where it is a ratio</text>`);
  for (let t = lo; t <= hi + 1e-9; t *= 2) {
    const tx = x(t).toFixed(1);
    parts.push(`<line x1="${tx}" x2="${tx}" y1="${top - 4}" y2="${top + bars.length * rowH}" stroke="${t === 1 ? '#222' : '#ddd'}" stroke-width="${t === 1 ? 1.5 : 1}"/>`);
    parts.push(`<text x="${tx}" y="${top + bars.length * rowH + 16}" text-anchor="middle" fill="#555">${t >= 1 ? t.toFixed(0) : t.toString()}×</text>`);
  }
  bars.forEach((b, i) => {
    const y = top + i * rowH;
    const x0 = x(1);
    const x1 = x(b.ratio);
    const met = b.target === undefined ? b.ratio <= 1 : b.ratio <= b.target;
    const fill = b.target === undefined ? '#6b8fc7' : met ? '#3a9d5d' : '#d0703c';
    parts.push(`<text x="${labelW - 8}" y="${y + 16}" text-anchor="end"><title>${esc(`baseline: ${b.baseline}`)}</title>${esc(b.label)}</text>`);
    parts.push(`<rect x="${Math.min(x0, x1).toFixed(1)}" y="${y + 5}" width="${Math.max(1, Math.abs(x1 - x0)).toFixed(1)}" height="${rowH - 10}" fill="${fill}"><title>${esc(`${b.label}: ${b.ratio.toFixed(2)}× ${b.baseline}`)}</title></rect>`);
    parts.push(`<text x="${(Math.max(x0, x1) + 4).toFixed(1)}" y="${y + 16}" fill="#222">${b.ratio.toFixed(2)}×</text>`);
    if (b.target !== undefined) {
      const tx = x(b.target);
      parts.push(`<path d="M${tx.toFixed(1)} ${y + 3} l5 10 l-5 10 l-5 -10 z" fill="#222"><title>${esc(`target ${b.target.toFixed(2)}×`)}</title></path>`);
    }
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
