// @ts-check
// Small DOM helpers: elements built with the DOM API (never innerHTML, so nothing from the hub is
// ever parsed as markup), relative times, and re-rendering a region without losing keyboard focus.

/** @typedef {string | number | Node | null | undefined | false | ChildList} Child */
/** @typedef {Child[]} ChildList */
/** @typedef {Record<string, string | number | boolean | null | undefined | ((e: Event) => void)>} Attrs */

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * @param {Element} el
 * @param {Attrs} attrs
 */
function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

/**
 * @param {Element} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const c of /** @type {(string | number | Node | null | undefined | false)[]} */ (children.flat(8))) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'object' ? c : String(c));
  }
}

/**
 * An HTML element: h('button', { class: 'x', onclick: fn }, 'Label').
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, /** @type {Child[]} */ (children));
  return el;
}

/**
 * An SVG element.
 * @param {string} tag
 * @param {Attrs} [attrs]
 * @param {...(Child | Child[])} children
 * @returns {SVGElement}
 */
export function s(tag, attrs = {}, ...children) {
  const el = /** @type {SVGElement} */ (document.createElementNS(SVG_NS, tag));
  setAttrs(el, attrs);
  append(el, /** @type {Child[]} */ (children));
  return el;
}

/**
 * Replace a region's content; the element that had focus inside it (found again by its
 * data-key) keeps it, so a keyboard user is not thrown out by a live update.
 * @param {Element} region
 * @param {...(Child | Child[])} children
 */
export function render(region, ...children) {
  const active = document.activeElement;
  const key = active && region.contains(active) ? active.getAttribute('data-key') : null;
  region.replaceChildren();
  append(region, /** @type {Child[]} */ (children));
  if (key) {
    const again = region.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again instanceof HTMLElement) again.focus();
  }
}

/** @param {string | null | undefined} iso */
export function ago(iso) {
  if (!iso) return '—';
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s)) return '—';
  if (s < 5) return 'just now';
  if (s < 90) return `${s} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** A relative time that shows the exact instant on hover and to assistive technology. */
/** @param {string | null | undefined} iso */
export function time(iso) {
  if (!iso) return h('span', {}, '—');
  return h('time', { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso));
}

/**
 * Bring every relative time under root up to now, without a new answer (during an outage the
 * last one stays on screen, and "just now" must not stay "just now").
 * @param {Element} root
 */
export function refreshTimes(root) {
  for (const el of root.querySelectorAll('time[datetime]')) {
    const text = ago(el.getAttribute('datetime'));
    if (el.textContent !== text) el.textContent = text;
  }
}

/** @param {number} bytes */
export function bytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1048576) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

/**
 * A labelled text badge (state is said in words, never by colour alone).
 * @param {string} text
 * @param {'ok' | 'warn' | 'bad' | 'off'} tone
 */
export function badge(text, tone) {
  return h('span', { class: `badge ${tone}` }, text);
}

/**
 * A table with a caption and column headers; rows are arrays of cells.
 * @param {string} caption
 * @param {string[]} head
 * @param {Child[][]} rows
 * @param {string} [empty]
 */
export function table(caption, head, rows, empty = 'None.') {
  if (rows.length === 0) return h('p', { class: 'empty' }, `${caption}: ${empty}`);
  return h(
    'div',
    { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': caption },
    h(
      'table',
      {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))),
    ),
  );
}
