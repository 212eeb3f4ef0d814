/**
 * Stacked horizontal bars, one per run, each cut into the same named spans (ms): where a request's
 * time goes, run beside run (bench/desired-syscalls.ts).
 */
import { esc } from './chart';

export interface SpanRun {
  label: string;
  /** Median ms of each span, in the order of `SpanChart.spans`. */
  ms: readonly number[];
}

export interface SpanChart {
  title: string;
  subtitle: string;
  spans: readonly string[];
  runs: readonly SpanRun[];
}

const COLOURS = ['#6b8fc7', '#9aa6b2', '#d0703c', '#c23b3b', '#3a9d5d', '#8a6bbf', '#c7a03c'];

export function spanChartSvg(c: SpanChart): string {
  if (c.runs.some((r) => r.ms.length !== c.spans.length)) throw new Error('every run needs one figure per span');
  const labelW = 170;
  const plotW = 520;
  const rowH = 34;
  const top = 52;
  const legendTop = top + c.runs.length * rowH + 30;
  const height = legendTop + c.spans.length * 18 + 10;
  const width = labelW + plotW + 60;
  const longest = Math.max(...c.runs.map((r) => r.ms.reduce((a, b) => a + b, 0)), 1e-9);
  // Round the axis up to a whole number of ms (at least 1).
  const axis = Math.max(1, Math.ceil(longest));
  const x = (ms: number) => labelW + (ms / axis) * plotW;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12" role="img" aria-label="${esc(c.title)}">`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="10" y="20" font-size="14" font-weight="600">${esc(c.title)}</text>`);
  parts.push(`<text x="10" y="36" fill="#555">${esc(c.subtitle)}</text>`);
  const step = axis <= 5 ? 1 : axis <= 10 ? 2 : 5;
  for (let t = 0; t <= axis + 1e-9; t += step) {
    const tx = x(t).toFixed(1);
    parts.push(`<line x1="${tx}" x2="${tx}" y1="${top - 4}" y2="${top + c.runs.length * rowH}" stroke="#ddd"/>`);
    parts.push(`<text x="${tx}" y="${top + c.runs.length * rowH + 16}" text-anchor="middle" fill="#555">${t} ms</text>`);
  }
  c.runs.forEach((r, i) => {
    const y = top + i * rowH;
    parts.push(`<text x="${labelW - 8}" y="${y + 20}" text-anchor="end">${esc(r.label)}</text>`);
    let at = 0;
    r.ms.forEach((ms, k) => {
      const w = x(at + ms) - x(at);
      parts.push(
        `<rect x="${x(at).toFixed(1)}" y="${y + 6}" width="${Math.max(0.5, w).toFixed(1)}" height="${rowH - 12}" fill="${COLOURS[k % COLOURS.length]}"><title>${esc(`${r.label}: ${c.spans[k]}: ${ms.toFixed(3)} ms`)}</title></rect>`,
      );
      at += ms;
    });
    parts.push(`<text x="${(x(at) + 4).toFixed(1)}" y="${y + 20}" fill="#222">${at.toFixed(2)} ms</text>`);
  });
  c.spans.forEach((s, k) => {
    const y = legendTop + k * 18;
    parts.push(`<rect x="${labelW}" y="${y}" width="12" height="12" fill="${COLOURS[k % COLOURS.length]}"/>`);
    parts.push(`<text x="${labelW + 18}" y="${y + 10}">${esc(s)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
