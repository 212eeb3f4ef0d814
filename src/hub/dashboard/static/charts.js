// @ts-check
// The two pictures: GPUs by model (horizontal bars) and a cluster's connect/disconnect strip.
// Inline SVG built with the DOM; each carries a text alternative.
import { h, s } from './dom.js';

/** Bars drawn at most: the rest are summed into one. */
const MAX_BARS = 12;

/** Characters of a bar's label, as a reader counts them (one emoji, flag or accented letter is one). */
const LABEL_CHARS = 26;

/** @type {Intl.Segmenter | null | undefined} */
let graphemes;

/**
 * `text` cut to `max` characters with an ellipsis, never inside a character: a UTF-16 slice
 * splits an emoji into a lone surrogate (drawn as a replacement box) and a grapheme cluster (a
 * flag, a skin tone, a letter with its accent) into parts. Model names are the operator's to
 * choose, so any of them can come.
 * @param {string} text
 * @param {number} [max]
 */
export function clipLabel(text, max = LABEL_CHARS) {
  if (text.length <= max) return text;
  graphemes ??= typeof Intl.Segmenter === 'function' ? new Intl.Segmenter(undefined, { granularity: 'grapheme' }) : null;
  const parts = graphemes ? Array.from(graphemes.segment(text), (g) => g.segment) : Array.from(text);
  return parts.length > max ? `${parts.slice(0, max - 1).join('')}…` : text;
}

/**
 * Model names are the operator's to choose, one per GPU if it likes. The hub lists the most
 * numerous and sums the rest (`other`); the chart draws at most MAX_BARS, the rest in one bar,
 * so one cluster's operator cannot make the chart (drawn on the fleet view too) unbounded.
 * @param {{model: string, count: number, unhealthy: number}[]} models
 * @param {{models: number, count: number, unhealthy: number} | undefined} other
 */
function boundedModels(models, other) {
  const unlisted = other && other.models > 0 ? other : null;
  if (models.length <= MAX_BARS && !unlisted) return models;
  const top = [...models].sort((a, b) => b.count - a.count);
  const keep = Math.min(top.length, MAX_BARS - 1);
  const bar = { model: '', count: unlisted?.count ?? 0, unhealthy: unlisted?.unhealthy ?? 0 };
  let n = unlisted?.models ?? 0;
  for (const m of top.slice(keep)) {
    bar.count += m.count;
    bar.unhealthy += m.unhealthy;
    n++;
  }
  bar.model = `${n} other model${n === 1 ? '' : 's'}`;
  return [...top.slice(0, keep), bar];
}

/**
 * @param {{model: string, count: number, unhealthy: number}[]} all
 * @param {string} title
 * @param {{models: number, count: number, unhealthy: number}} [other] the models the hub left out of `all`, summed
 */
export function gpuBars(all, title, other) {
  if (all.length === 0 && !(other && other.models > 0)) return h('p', { class: 'empty' }, `${title}: no GPUs reported.`);
  const models = boundedModels(all, other);
  // A loop, not Math.max(...counts): spread arguments overflow the stack past ~125,000 models.
  const max = models.reduce((m, x) => Math.max(m, x.count), 1);
  const rowH = 22;
  const labelW = 170;
  const barW = 260;
  const width = labelW + barW + 90;
  const height = models.length * rowH + 4;
  const summary = models.map((m) => `${m.model}: ${m.count}${m.unhealthy ? ` (${m.unhealthy} unhealthy)` : ''}`).join(', ');
  return h(
    'figure',
    { class: 'chart' },
    h('figcaption', {}, title),
    s(
      'svg',
      { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': `${title}: ${summary}` },
      models.map((m, i) => {
        const y = i * rowH + 2;
        const w = Math.max(2, Math.round((m.count / max) * barW));
        const bad = m.unhealthy ? Math.max(2, Math.round((m.unhealthy / max) * barW)) : 0;
        return s(
          'g',
          {},
          s('text', { x: labelW - 6, y: y + 14, 'text-anchor': 'end', class: 'lbl' }, clipLabel(m.model)),
          s('rect', { x: labelW, y: y + 2, width: w, height: rowH - 6, class: 'bar' }),
          bad ? s('rect', { x: labelW + w - bad, y: y + 2, width: bad, height: rowH - 6, class: 'bar-bad' }) : null,
          s('text', { x: labelW + w + 6, y: y + 14, class: 'val' }, `${m.count}${m.unhealthy ? ` (${m.unhealthy} unhealthy)` : ''}`),
        );
      }),
    ),
  );
}

/**
 * Connected intervals between `from` and `to`. A session that stopped polling (the owner still
 * says connected but the cluster is not) ends at its last poll. A `truncated` history (only the
 * newest changes listed) says nothing before its oldest change: `knownFrom` is where it starts,
 * and nothing before it is drawn as connected or counted.
 * @param {{connected_at_start: boolean, changes: {at: string, connected: boolean}[], truncated?: boolean}} history
 * @param {{from: string, to: string, connectedNow: boolean, lastPollAt: string | null}} w
 * @returns {{intervals: [number, number][], connects: number[], t0: number, t1: number, knownFrom: number}}
 */
export function intervalsOf(history, w) {
  const t0 = Date.parse(w.from);
  const t1 = Date.parse(w.to);
  /** @type {[number, number][]} */
  const intervals = [];
  /** @type {number[]} */
  const connects = [];
  const first = history.changes[0];
  const knownFrom = history.truncated ? (first ? Math.max(t0, Math.min(t1, Date.parse(first.at))) : t1) : t0;
  let up = history.connected_at_start && !history.truncated ? t0 : null;
  for (const c of history.changes) {
    const at = Math.max(t0, Math.min(t1, Date.parse(c.at)));
    if (c.connected) {
      connects.push(at);
      if (up === null) up = at;
    } else if (up !== null) {
      intervals.push([up, at]);
      up = null;
    }
  }
  if (up !== null) {
    const end = w.connectedNow || !w.lastPollAt ? t1 : Math.max(up, Math.min(t1, Date.parse(w.lastPollAt)));
    intervals.push([up, end]);
  }
  return { intervals, connects, t0, t1, knownFrom };
}

/**
 * @param {{connected_at_start: boolean, changes: {at: string, connected: boolean}[], truncated?: boolean}} history
 * @param {{from: string, to: string, connectedNow: boolean, lastPollAt: string | null, hours: number, name: string}} w
 */
export function strip(history, w) {
  const { intervals, connects, t0, t1, knownFrom } = intervalsOf(history, w);
  const width = 180;
  const height = 16;
  const x = (/** @type {number} */ t) => ((t - t0) / Math.max(1, t1 - t0)) * width;
  const upMs = intervals.reduce((sum, [a, b]) => sum + (b - a), 0);
  const cut = knownFrom > t0;
  // Over the part the history covers: what the hub left out is neither up nor down.
  const pct = Math.round((upMs / Math.max(1, t1 - knownFrom)) * 100);
  const n = `${cut ? 'at least ' : ''}${connects.length} connect${connects.length === 1 ? '' : 's'}`;
  const since = cut ? ` since ${new Date(knownFrom).toISOString().slice(11, 16)} UTC (older changes not listed)` : '';
  const label = `${w.name}: connected ${pct}% of the last ${w.hours} h${since}, ${n}`;
  return s(
    'svg',
    { viewBox: `0 0 ${width} ${height}`, width, height, class: 'strip', role: 'img', 'aria-label': label },
    s('title', {}, label),
    s('rect', { x: 0, y: 3, width, height: height - 6, class: 'strip-down' }),
    cut ? s('rect', { x: 0, y: 3, width: Math.max(1, x(knownFrom)), height: height - 6, class: 'strip-unknown' }) : null,
    intervals.map(([a, b]) => s('rect', { x: x(a), y: 3, width: Math.max(1, x(b) - x(a)), height: height - 6, class: 'strip-up' })),
    connects.map((t) => s('rect', { x: Math.min(width - 1, x(t)), y: 0, width: 1, height, class: 'strip-tick' })),
  );
}

/** @param {number} n @param {number} of */
export function ratio(n, of) {
  return h('span', { class: n < of ? 'warn-text' : '' }, `${n} / ${of}`);
}
