/** Number formatting for RESULTS.md and the console. */
import type { Repeated } from './stats';

export function fmtNum(v: number, digits?: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  const a = Math.abs(v);
  // Small values keep three significant digits (0.0033 cores is not 0.00).
  const d = digits ?? (a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 || a === 0 ? 2 : Math.min(6, 2 - Math.floor(Math.log10(a))));
  return v.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

export function fmtMs(v: number): string {
  return `${fmtNum(v)} ms`;
}

export function pct(v: number): string {
  return Number.isFinite(v) ? `${fmtNum(v * 100, v >= 0.1 ? 0 : 1)}%` : 'n/a';
}

export function ratio(v: number): string {
  return Number.isFinite(v) ? `${fmtNum(v, v >= 10 ? 0 : v >= 1 ? 1 : 2)}×` : 'n/a';
}

/** "12.3 (11.8–13.0)" */
export function fmtRepeated(r: Repeated, unit = '', digits?: number): string {
  const u = unit ? ` ${unit}` : '';
  if (!Number.isFinite(r.median)) return 'n/a';
  if (r.runs.length <= 1 || r.min === r.max) return `${fmtNum(r.median, digits)}${u}`;
  return `${fmtNum(r.median, digits)}${u} (${fmtNum(r.min, digits)}–${fmtNum(r.max, digits)}, ${r.runs.length} runs)`;
}
