/**
 * The pictures of bench/INGEST-CURVE.md (bench/ingest-curve.ts): ack latency, and CPU per frame,
 * against the rate achieved, one line per server (and quantile). Plain SVG text, no dependencies, as chart.ts.
 */
import { esc } from './chart';

export interface Series {
  label: string;
  color: string;
  dash: string;
  /** [frames/s achieved, latency ms] at each offered rate, joined in this order. */
  points: [number, number][];
  /**
   * Points drawn hollow and not joined: the unpaced run, whose rate is the server's own (noisier
   * than a paced one, and it may fall below the fastest paced point: joined, the line doubled back).
   */
  open?: [number, number][];
}

export interface CurveOptions {
  title: string;
  /** The y axis's unit, written after each decade ('ms', 'µs'). */
  yUnit: string;
  /** A rate marked with a dotted line (the one-session target), if any. */
  targetFps?: number;
  /**
   * Rates on a logarithmic axis (decades from below the slowest point), for a figure that spans
   * several decades of rate (CPU per frame from 100 frames/s to saturation); else linear from 0
   * in 10k steps.
   */
  xLog?: boolean;
}

/**
 * A quantity on a logarithmic axis against frames/s achieved. The axes span every point: whole
 * decades around the lowest and highest value, and the rates up to the highest (or the target,
 * if higher) with room to its right.
 */
export function curveSvg(o: CurveOptions, series: readonly Series[]): string {
  const W = 760;
  const H = 420;
  const left = 70;
  const right = 200;
  const top = 40;
  const bottom = 50;
  const pw = W - left - right;
  const ph = H - top - bottom;
  const all = series.flatMap((s) => [...s.points, ...(s.open ?? [])]).filter(([px, py]) => Number.isFinite(px) && px > 0 && Number.isFinite(py) && py > 0);
  if (all.length === 0) throw new Error('curveSvg: no point with a positive rate and value');
  const target = o.targetFps ?? 0;
  const xHigh = Math.max(target, ...all.map(([x]) => x)) * 1.05;
  // Room to the right of the fastest point, so none sits on the frame.
  const xMax = o.xLog ? 10 ** Math.ceil(Math.log10(xHigh)) : Math.ceil(xHigh / 10_000) * 10_000;
  const xMin = o.xLog ? Math.min(xMax / 10, 10 ** Math.floor(Math.log10(Math.min(...all.map(([x]) => x))))) : 0;
  const yMin = 10 ** Math.floor(Math.log10(Math.max(0.01, Math.min(...all.map(([, y]) => y)))));
  // At least one decade, also when every value is the same power of ten.
  const yMax = Math.max(yMin * 10, 10 ** Math.ceil(Math.log10(Math.max(...all.map(([, y]) => y)))));
  const x = o.xLog
    ? (v: number) => left + ((Math.log10(v) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin))) * pw
    : (v: number) => left + (v / xMax) * pw;
  const y = (v: number) => top + ph - ((Math.log10(Math.max(v, yMin)) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * ph;
  const decade = (d: number) => (d >= 1 ? String(d) : d.toFixed(String(d).length - 2));
  const rate = (v: number) => (v >= 1000 ? `${v / 1000}k` : String(v));
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${left}" y="22" font-size="14" font-weight="bold">${esc(o.title)}</text>`,
  ];
  for (let d = yMin; d <= yMax * 1.0001; d *= 10) {
    out.push(`<line x1="${left}" x2="${left + pw}" y1="${y(d).toFixed(1)}" y2="${y(d).toFixed(1)}" stroke="#ddd"/>`);
    out.push(`<text x="${left - 6}" y="${(y(d) + 4).toFixed(1)}" text-anchor="end">${decade(d)} ${esc(o.yUnit)}</text>`);
  }
  const xTicks: number[] = [];
  if (o.xLog) for (let v = xMin; v <= xMax * 1.0001; v *= 10) xTicks.push(Math.round(v));
  else for (let v = 0; v <= xMax; v += 10_000) xTicks.push(v);
  for (const v of xTicks) {
    out.push(`<line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${top}" y2="${top + ph}" stroke="#eee"/>`);
    out.push(`<text x="${x(v).toFixed(1)}" y="${top + ph + 16}" text-anchor="middle">${rate(v)}</text>`);
  }
  out.push(`<text x="${left + pw / 2}" y="${H - 10}" text-anchor="middle">frames/s achieved${o.xLog ? ' (log)' : ''} (● paced at an offered rate; ○ unpaced)</text>`);
  if (target > 0) {
    out.push(`<line x1="${x(target).toFixed(1)}" x2="${x(target).toFixed(1)}" y1="${top}" y2="${top + ph}" stroke="#555" stroke-dasharray="2 3"/>`);
    out.push(`<text x="${(x(target) - 4).toFixed(1)}" y="${top + 12}" text-anchor="end" fill="#555">target ${rate(target)}</text>`);
  }
  out.push(`<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  for (const [i, s] of series.entries()) {
    const d = s.points.map(([px, py], k) => `${k ? 'L' : 'M'}${x(px).toFixed(1)},${y(py).toFixed(1)}`).join(' ');
    if (d) out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`);
    for (const [px, py] of s.points) out.push(`<circle cx="${x(px).toFixed(1)}" cy="${y(py).toFixed(1)}" r="3" fill="${s.color}"/>`);
    for (const [px, py] of s.open ?? []) out.push(`<circle cx="${x(px).toFixed(1)}" cy="${y(py).toFixed(1)}" r="4" fill="#fff" stroke="${s.color}" stroke-width="1.5"/>`);
    const ly = top + 10 + i * 20;
    out.push(`<line x1="${left + pw + 14}" x2="${left + pw + 44}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`);
    out.push(`<text x="${left + pw + 50}" y="${ly + 4}">${esc(s.label)}</text>`);
  }
  out.push('</svg>', '');
  return out.join('\n');
}
