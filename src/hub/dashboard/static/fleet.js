// @ts-check
// The fleet view: totals, GPUs by model, and every cluster with its state, counts and connection
// strip; sort and filter; register a cluster.
import { call, pollAll } from './api.js';
import { gpuBars, ratio, strip } from './charts.js';
import { badge, h, render, time } from './dom.js';
import { clearFormErrors, field, notify, onSubmit, operatorCommand, secretPanel, showFormError } from './ui.js';

const HOURS = 6;

/** Filter and sort state survives re-renders (the inputs are built once per visit). */
const view = { name: '', state: 'all', model: 'all', sort: 'name', dir: 1 };

/** Clusters a page of /admin/fleet holds (the API's maximum): a 10,000-cluster fleet is 20 pages. */
const FLEET_PAGE = 500;

/**
 * The cluster as the fleet view shows it: the fleet summary, read every poll, which carries the
 * operator version and contention (a hub before it had them only in the cluster list, read every
 * fifth poll from such a hub only: they showed up to 5 s late). The region is the operator's (cluster.observed), from
 * the fleet summary only: the list's `region` is the hub's own region, and a location hint is
 * where session objects run, not where the cluster is.
 * @param {any} f an item of /admin/fleet
 * @param {any} c an item of /admin/clusters, or undefined
 */
function merge(f, c) {
  const contention = ('contention' in f ? f.contention : c?.contention) ?? null;
  // In the last hour, from the fleet summary; a hub without it has no such count (not the all-time one).
  const refusals = typeof f.refusals_1h === 'number' ? f.refusals_1h : null;
  return {
    ...f,
    region: f.region ?? null,
    operator_version: ('operator_version' in f ? f.operator_version : (c?.operator_version ?? c?.session?.live?.operator_version)) ?? null,
    contention,
    refusals,
    state: f.disabled ? 'disabled' : contention ? 'contended' : f.connected ? 'connected' : 'disconnected',
  };
}

/** @param {ReturnType<typeof merge>} c */
function stateCell(c) {
  const since = c.since ? [' since ', time(c.since)] : [];
  if (c.disabled) return h('span', {}, badge('disabled', 'off'), c.connected ? [' ', badge('still connected', 'warn')] : null);
  if (c.contention) return h('span', {}, badge('contended', 'bad'), ` ${c.contention.displacements ?? '?'} displacements`);
  return c.connected ? h('span', {}, badge('connected', 'ok'), since) : h('span', {}, badge(c.since ? 'disconnected' : 'never connected', 'bad'), since);
}

/** The hub counts rejections up to this (src/hub/db/capped-count.ts): the count means "at least". */
const COUNT_CAP = 10_000;
/** @param {number} n */
const counted = (n) => (n >= COUNT_CAP ? `${COUNT_CAP}+` : String(n));

/** Rows of the fleet table drawn at a time. */
const ROW_PAGE = 500;

/** @type {Record<string, (c: any) => string | number>} */
const SORT_KEYS = {
  name: (c) => c.name,
  state: (c) => ['connected', 'contended', 'disconnected', 'disabled'].indexOf(c.state),
  gpus: (c) => -c.gpus,
  sync: (c) => -c.deployments.out_of_sync,
  last_frame: (c) => (c.last_frame_at ? -Date.parse(c.last_frame_at) : 0),
};

export function fleetView() {
  const totalsEl = h('section', { 'aria-labelledby': 'fleet-h' });
  const chartEl = h('div', { class: 'charts' });
  const tableEl = h('div', { 'aria-live': 'off' });
  const countEl = h('p', { class: 'muted', role: 'status' });
  const modelSelect = h('select', { id: 'filter-model', onchange: () => ((view.model = modelSelect.value), refilter()) }, h('option', { value: 'all' }, 'any GPU model'));
  /** @type {any} */
  let latest = null;
  /** @type {any[] | null} */
  let clusterList = null;
  /** The fleet walk stopped before the last page. */
  let truncated = false;
  let polls = 0;
  /** Whether the next refresh draws the totals whatever its answers (see cluster.js `drawAll`). */
  let drawAll = true;
  /** Rows drawn of the sorted, filtered list: more on request ("Show more"), back to one page when a filter changes. */
  let rowLimit = ROW_PAGE;
  /** A filter changed: draw from the first page of rows again. */
  const refilter = () => {
    rowLimit = ROW_PAGE;
    draw();
  };

  const filters = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter clusters', onsubmit: (e) => e.preventDefault() },
    h('div', { class: 'field' }, h('label', { for: 'filter-name' }, 'Name'), h('input', { id: 'filter-name', type: 'search', value: view.name, oninput: (e) => ((view.name = /** @type {HTMLInputElement} */ (e.target).value), refilter()) })),
    h(
      'div',
      { class: 'field' },
      h('label', { for: 'filter-state' }, 'State'),
      h(
        'select',
        { id: 'filter-state', onchange: (e) => ((view.state = /** @type {HTMLSelectElement} */ (e.target).value), refilter()) },
        ['all', 'connected', 'disconnected', 'disabled', 'contended', 'out of sync'].map((v) => h('option', { value: v, selected: v === view.state }, v)),
      ),
    ),
    h('div', { class: 'field' }, h('label', { for: 'filter-model' }, 'GPU model'), modelSelect),
  );

  const regForm = h(
    'form',
    { class: 'inline', 'aria-labelledby': 'register-h' },
    h('h2', { id: 'register-h' }, 'Register a cluster'),
    field('register-name', 'Name', { required: true, placeholder: 'gpu-east-1', autocomplete: 'off' }),
    h('button', { type: 'submit' }, 'Register'),
    h('p', { class: 'form-error', role: 'alert' }),
  );
  const secretEl = h('div');
  onSubmit(regForm, async () => {
    clearFormErrors(regForm);
    const input = /** @type {HTMLInputElement} */ (regForm.querySelector('input'));
    try {
      const r = await call('POST', '/clusters', { name: input.value.trim() });
      render(secretEl, secretPanel(`Enrollment token for ${r.name}`, r.enrollment_token, operatorCommand(r.name, r.enrollment_token)));
      notify(`Registered ${r.name}.`);
      input.value = '';
    } catch (err) {
      showFormError(regForm, err);
    }
  });

  function draw() {
    if (!latest) return;
    const { fleet, clusters } = latest;
    const byUid = new Map(clusters.map((/** @type {any} */ c) => [c.uid, c]));
    const all = fleet.items.map((/** @type {any} */ f) => merge(f, byUid.get(f.uid)));
    const shown = all.filter(
      (/** @type {any} */ c) =>
        (!view.name || c.name.includes(view.name.toLowerCase())) &&
        (view.state === 'all' || (view.state === 'out of sync' ? c.deployments.out_of_sync > 0 : c.state === view.state)) &&
        (view.model === 'all' || c.gpus_by_model.some((/** @type {any} */ g) => g.model === view.model)),
    );
    const key = SORT_KEYS[view.sort] ?? SORT_KEYS.name;
    shown.sort((/** @type {any} */ a, /** @type {any} */ b) => {
      const ka = key(a);
      const kb = key(b);
      return (ka < kb ? -1 : ka > kb ? 1 : a.name < b.name ? -1 : 1) * view.dir;
    });
    // Filters apply to what was read; when that is not the whole fleet, say how much it is.
    const matched = truncated
      ? `${shown.length} of the first ${all.length} of ${fleet.totals?.clusters ?? 'more'} clusters`
      : `${shown.length} of ${all.length} clusters`;
    // Every row is rebuilt at each poll (last frames move every second): at 10,000 clusters that
    // was about a second of the page's thread per poll, and per keystroke in the name filter.
    const drawn = shown.slice(0, rowLimit);
    countEl.textContent =
      drawn.length < shown.length
        ? `${matched} match; the first ${drawn.length} are drawn, in this order (narrow the filters, or show more below)`
        : `${matched} shown${truncated ? ` (the list stops at ${all.length})` : ''}`;
    const sortButton = (/** @type {string} */ k, /** @type {string} */ label) =>
      h(
        'button',
        {
          type: 'button',
          class: 'sort',
          'data-key': `sort-${k}`,
          'aria-label': `Sort by ${label}`,
          'aria-pressed': view.sort === k,
          onclick: () => {
            view.dir = view.sort === k ? -view.dir : 1;
            view.sort = k;
            draw();
          },
        },
        label,
        view.sort === k ? (view.dir > 0 ? ' ▲' : ' ▼') : '',
      );
    const head = [
      sortButton('name', 'Cluster'),
      sortButton('state', 'State'),
      'Region',
      sortButton('last_frame', 'Last frame'),
      'Operator',
      'Nodes ready',
      sortButton('gpus', 'GPUs'),
      sortButton('sync', 'Deployments in sync'),
      'Rejections (1 h)',
      'Refusals (1 h)',
      `Connected, last ${HOURS} h`,
    ];
    /** @type {any[][]} */
    const rows = drawn.map((/** @type {any} */ c) => [
      h('a', { href: `#/clusters/${encodeURIComponent(c.name)}`, 'data-key': `open-${c.uid}` }, c.name),
      stateCell(c),
      c.region ?? '—',
      time(c.last_frame_at),
      c.operator_version ?? '—',
      c.nodes ? ratio(c.nodes_ready, c.nodes) : '0',
      gpuCell(c),
      c.deployments.desired ? ratio(c.deployments.in_sync, c.deployments.desired) : '—',
      c.rejections_1h ? h('span', { class: 'warn-text' }, counted(c.rejections_1h)) : '0',
      c.refusals === null ? '—' : c.refusals ? h('span', { class: 'warn-text' }, String(c.refusals)) : '0',
      strip(c.connections, { from: new Date(Date.now() - HOURS * 3600_000).toISOString(), to: new Date().toISOString(), connectedNow: c.connected, lastPollAt: c.last_poll_at, hours: HOURS, name: c.name }),
    ]);
    const t = h(
      'table',
      { class: 'fleet' },
      h('caption', {}, 'Clusters'),
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col', 'aria-sort': typeof c !== 'string' && c.getAttribute('aria-pressed') === 'true' ? (view.dir > 0 ? 'ascending' : 'descending') : null }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((cell, i) => (i === 0 ? h('th', { scope: 'row' }, cell) : h('td', { 'data-label': typeof head[i] === 'string' ? head[i] : head[i].textContent.replace(/ [▲▼]$/, '') }, cell)))))),
    );
    const more =
      drawn.length < shown.length
        ? h(
            'button',
            {
              type: 'button',
              'data-key': 'fleet-more',
              onclick: () => {
                rowLimit += ROW_PAGE;
                draw();
              },
            },
            `Show ${Math.min(ROW_PAGE, shown.length - drawn.length)} more`,
          )
        : null;
    render(tableEl, all.length ? [h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'Clusters table', 'data-key': 'fleet-table' }, t), more] : h('p', { class: 'empty' }, 'No clusters registered yet.'));
  }

  /** @param {any} fleet @param {any[]} clusters */
  function drawTotals(fleet, clusters) {
    const t = fleet.totals;
    const byUid = new Map(clusters.map((c) => [c.uid, c]));
    const stat = (/** @type {string} */ label, /** @type {string | number} */ value, tone = '') => h('div', { class: `stat ${tone}` }, h('span', { class: 'stat-v' }, String(value)), h('span', { class: 'stat-l' }, label));
    render(
      totalsEl,
      h('h2', { id: 'fleet-h' }, 'Fleet'),
      h(
        'div',
        { class: 'stats' },
        stat('clusters', t.clusters),
        stat('connected', t.connected),
        stat('disabled', t.disabled),
        stat('nodes', t.nodes),
        stat('GPUs', t.gpus),
        stat('deployments in sync', `${t.deployments.in_sync} / ${t.deployments.desired}`, t.deployments.out_of_sync ? 'warn' : ''),
        stat('rejections, last hour', counted(t.rejections_1h), t.rejections_1h ? 'warn' : ''),
        // From the fleet summary, read every poll, as the rows' state is: the cluster list is read
        // every fifth poll, and the total disagreed with the rows for up to 5 s.
        stat('contended', fleet.items.filter((/** @type {any} */ f) => merge(f, byUid.get(f.uid)).contention).length),
      ),
    );
    render(chartEl, gpuBars(t.gpus_by_model, 'GPUs by model across the fleet', t.gpus_other_models));
    const reported = t.gpus_by_model.map((/** @type {any} */ g) => g.model);
    // The model filtering the table stays listed (and selected) after its last GPU is gone or it
    // left the hub's list: without its option the select showed "any GPU model" over a table
    // that the filter still emptied.
    const models = view.model !== 'all' && !reported.includes(view.model) ? [...reported, view.model] : reported;
    const current = [...modelSelect.options].slice(1).map((o) => o.value);
    if (models.join('\n') !== current.join('\n')) {
      render(modelSelect, h('option', { value: 'all' }, 'any GPU model'), models.map((/** @type {string} */ m) => h('option', { value: m, selected: m === view.model }, m)));
    }
  }

  return {
    title: 'Fleet',
    root: h('div', { class: 'view' }, totalsEl, chartEl, h('section', { 'aria-label': 'Clusters' }, h('h2', {}, 'Clusters'), filters, countEl, tableEl), h('section', {}, regForm, secretEl)),
    async refresh() {
      // /admin/fleet carries everything the view shows (connected, counts, sync, rejections,
      // history, operator version, contention) and is read every poll. Only an older hub's fleet
      // summary lacks the operator version and contention, which its cluster list had: read then,
      // every fifth poll. (Read always, it cost each open dashboard a walk of the whole list,
      // every cluster's view, every fifth second, for nothing shown.)
      const force = drawAll;
      drawAll = true;
      // Fleet-wide totals come with the first page; later pages leave them out (totals=false)
      // rather than recount the whole fleet once per page.
      const fleet = await pollAll(`/fleet?hours=${HOURS}&limit=${FLEET_PAGE}`, { more: 'totals=false' });
      const older = fleet.items.some((/** @type {any} */ f) => !('contention' in f) || !('operator_version' in f));
      const listDue = older && (clusterList === null || polls++ % 5 === 0);
      const clusters = listDue ? await pollAll('/clusters?limit=500') : null;
      if (clusters) clusterList = clusters.items;
      else if (!older) clusterList = null;
      truncated = fleet.truncated;
      // Relative times ("12 s ago") move even when nothing changed, so redraw on every poll.
      latest = { fleet: { ...fleet.first, items: fleet.items }, clusters: clusterList ?? [] };
      if (fleet.changed || clusters?.changed || force) drawTotals(latest.fleet, latest.clusters);
      draw();
      drawAll = false;
    },
  };
}

/**
 * A cluster's GPUs by model, and the models the hub left out of its list (it lists the most
 * numerous only; older hubs send no `gpus_other_models`).
 * @param {any} c
 */
function gpuCell(c) {
  const listed = c.gpus_by_model.map((/** @type {any} */ g) => `${g.count} × ${g.model}`);
  const other = c.gpus_other_models;
  if (other && other.models > 0) listed.push(`${other.count} × ${other.models} other models`);
  return h('span', { title: listed.join(', ') }, listed.length ? listed.join(', ') : '0');
}
