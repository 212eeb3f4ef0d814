// @ts-check
// The cluster view: live session, connection history, deployments (desired next to observed),
// nodes, GPUs, operations, events and rejections; and the actions on each.
import { ApiError, call, poll, pollAll } from './api.js';
import { gpuBars, strip } from './charts.js';
import { badge, bytes, h, render, table, time } from './dom.js';
import { deploymentForm, operationForm, startOperation } from './forms.js';
import { confirmAction, notify, operatorCommand, secretPanel } from './ui.js';

const HOURS = 6;
/** Pages of 500 read per list: 2,000 rows; beyond that the view says the list is cut. */
const LIST_PAGES = 4;
const CONCLUDED = new Set(['succeeded', 'failed', 'cancelled', 'deadline_exceeded']);
/** The latest progress entries of an operation the hub answers, after its first ones (`history_omitted` between). */
const HISTORY_LATEST = 100;

/** @param {string} label */
function notFound(label) {
  return [h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Fleet')), h('h2', { id: 'cluster-h' }, `No cluster named ${label}`)];
}

/**
 * A cluster link that no cluster can have (malformed, a dot segment): nothing is read.
 * @param {string} shown the name as shown (decoded where it decodes)
 * @param {string} why
 */
export function missingClusterView(shown, why) {
  return {
    title: 'No such cluster',
    root: h('div', { class: 'view', 'aria-labelledby': 'cluster-h' }, notFound(shown), h('p', { class: 'muted' }, why)),
    refresh: async () => undefined,
  };
}

/**
 * A heading with the list's real size, and a note when only part of it is listed.
 * @param {string} title
 * @param {number | undefined} total from the hub (counts), when it reports one
 * @param {{items: any[], truncated: boolean}} list
 */
function listHead(title, total, list) {
  const n = total ?? list.items.length;
  return [
    h('h3', {}, `${title} (${n}${total === undefined && list.truncated ? '+' : ''})`),
    list.truncated ? h('p', { class: 'muted' }, `Listing the first ${list.items.length}${total === undefined ? '' : ` of ${total}`}.`) : null,
  ];
}

/** @param {string} name */
export function clusterView(name) {
  const id = encodeURIComponent(name);
  const base = `/clusters/${id}`;
  const region = (/** @type {string} */ label) => h('section', { 'aria-label': label });
  const headEl = h('div');
  const secretEl = h('div');
  const sessionEl = region('Live session');
  const historyEl = region('Connection history');
  const depsEl = region('Deployments');
  const nodesEl = region('Nodes');
  const gpusEl = region('GPUs');
  const opsEl = region('Operations');
  const followEl = h('div', { role: 'status', 'aria-live': 'polite' });
  const eventsEl = region('Recent events');
  const rejEl = region('Rejections');
  /** @type {string[]} operations this page started, followed to their result */
  const following = [];
  /** @type {() => void} */
  let refreshSoon = () => undefined;
  /** The hub's list counts last drawn (JSON), to redraw a heading when only its count moved. */
  let lastCounts = '';
  /**
   * Whether the next refresh draws every list whatever its answer: a refresh that failed part way
   * had read (and the poll memo kept) answers it never drew, and every later poll of them answers
   * 304, unchanged, so the table kept the older answer for good under a "Live" status (and its
   * Edit button the older configuration, which a Put then wrote back over the newer revision).
   */
  let drawAll = true;

  const dep = deploymentForm(name, () => refreshSoon());
  const opForm = operationForm(name, (opId) => follow(opId));

  /** @param {string} opId */
  function follow(opId) {
    // A start that failed (already told to the user) has nothing to follow: polling an empty id
    // would fail every refresh of this view.
    if (!opId) return;
    following.unshift(opId);
    following.length = Math.min(following.length, 5);
    refreshSoon();
  }

  /**
   * @param {string} question
   * @param {string} label
   * @param {() => Promise<void>} act
   */
  const guarded = (question, label, act) => async () => {
    if (!(await confirmAction(question, label))) return;
    try {
      await act();
      refreshSoon();
    } catch (err) {
      notify(err instanceof Error ? err.message : String(err), 'bad');
    }
  };

  /** @param {any} c */
  function drawHead(c) {
    const live = c.session?.connected === true;
    render(
      headEl,
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Fleet'), ' / ', c.name),
      h('h2', { id: 'cluster-h' }, c.name, ' ', c.disabled ? badge('disabled', 'off') : live ? badge('connected', 'ok') : badge('disconnected', 'bad'), c.contention ? [' ', badge('contended', 'bad')] : null),
      h('p', { class: 'muted' }, `uid ${c.uid} · registered `, time(c.created_at), ' · token issued ', time(c.token_issued_at), c.operator_version ? ` · operator ${c.operator_version}` : ''),
      // Three different things that were once all shown as "region": kept apart and named.
      h(
        'dl',
        { class: 'kv placement', 'aria-label': 'Placement' },
        [
          ['Region (reported by the operator)', c.observed_region],
          ['Hub region', c.region],
          ['Location hint', c.location_hint],
          ['Jurisdiction', c.jurisdiction],
        ].map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]),
      ),
      h(
        'div',
        { class: 'actions' },
        c.disabled
          ? h('button', { type: 'button', 'data-key': 'enable', onclick: () => act('enable') }, 'Enable')
          : h('button', { type: 'button', class: 'danger', 'data-key': 'disable', onclick: guarded(`Disable ${c.name}? Its live session is cut within one poll and it cannot connect until enabled.`, 'Disable', () => act('disable')) }, 'Disable'),
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            'data-key': 'rotate',
            onclick: guarded(`Rotate the enrollment token of ${c.name}? The current token stops working and a session on it is cut.`, 'Rotate token', async () => {
              const r = await call('POST', `${base}/rotate-token`);
              render(secretEl, secretPanel(`New enrollment token for ${c.name}`, r.enrollment_token, operatorCommand(c.name, r.enrollment_token)));
              notify('Token rotated. Copy the new one now.');
            }),
          },
          'Rotate token',
        ),
      ),
    );
  }

  /** @param {'enable' | 'disable'} what */
  async function act(what) {
    try {
      await call('POST', `${base}/${what}`);
      notify(`${name} ${what}d.`);
      refreshSoon();
    } catch (err) {
      notify(err instanceof Error ? err.message : String(err), 'bad');
    }
  }

  /** @param {any} c */
  function drawSession(c) {
    const s = c.session;
    if (!s) return render(sessionEl, h('h3', {}, 'Live session'), h('p', { class: 'empty' }, 'No session has connected yet.'));
    const l = s.live ?? {};
    const dl = (/** @type {[string, unknown][]} */ pairs) => h('dl', { class: 'kv' }, pairs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v instanceof Node ? v : v === undefined || v === null ? '—' : String(v))]));
    render(
      sessionEl,
      h('h3', {}, 'Live session'),
      dl([
        ['Connected', s.connected ? badge('yes', 'ok') : badge('no', 'bad')],
        ['Session id', h('code', {}, s.session_id)],
        ['Generation', s.generation],
        ['Claimed', time(s.claimed_at)],
        ['Last frame', time(l.last_frame_at)],
        ['Hub cursor (operator → hub applied)', l.hub_cursor],
        ['Operator cursor (hub → operator)', `${l.operator_cursor ?? '—'} of ${l.last_sent_seq ?? '—'} sent`],
        ['Replay buffer', l.replay_buffer_frames === undefined ? '—' : `${l.replay_buffer_frames} frames, ${bytes(l.replay_buffer_bytes ?? 0)}`],
        ['Send queue', l.send_queue_frames],
        ['Pending apply', l.pending_apply],
        ['Held subjects (retrying)', l.held_subjects],
        ['Apply statements in flight', l.apply_statements_in_flight],
        ['Desired revision sent', l.desired_watermark === undefined ? '—' : `${l.desired_watermark} of ${c.desired_revision} written`],
        ['Operator resync streams open', l.operator_resyncs_open ? h('span', {}, `${l.operator_resyncs_open}, the oldest since `, time(l.operator_resync_open_since)) : l.operator_resyncs_open],
        ['Read', s.source === 'object' ? 'from the session now' : 'from its last poll'],
      ]),
      h('h4', {}, 'Counters'),
      dl(Object.entries(l.counters ?? {})),
      h('h4', {}, 'Operator link (drops)'),
      c.link ? dl([['Dropped events', c.link.dropped_events], ['Evicted frames', c.link.evicted_frames], ['Replaced frames', c.link.replaced_frames], ['Handler failures (retried)', c.link.handler_failures ?? '—'], ['Progress reports dropped', c.link.dropped_progress ?? '—'], ['Reported', time(c.link.updated_at)]]) : h('p', { class: 'empty' }, 'No link statistics reported.'),
      c.contention
        ? [h('h4', {}, 'Contention'), dl([['Since', time(c.contention.since)], ['Displacements', c.contention.displacements]]), table('Sessions competing for this cluster', ['Session', 'Address', 'Operator'], (c.contention.sessions ?? []).map((/** @type {any} */ x) => [x.session_id, x.remote_addr ?? '—', x.operator_version ?? '—']))]
        : null,
    );
  }

  /** @param {any} c @param {any[]} conns newest first @param {boolean} more older changes exist past this page */
  function drawHistory(c, conns, more) {
    const to = new Date().toISOString();
    const from = new Date(Date.now() - HOURS * 3600_000).toISOString();
    const inWindow = conns.filter((x) => x.at > from).reverse();
    const before = conns.find((x) => x.at <= from);
    // A page that ends inside the window leaves its start unknown, not disconnected.
    const truncated = more && !before;
    render(
      historyEl,
      h('h3', {}, `Connections, last ${HOURS} h`),
      strip({ connected_at_start: before?.connected === true, changes: inWindow, truncated }, { from, to, connectedNow: c.session?.connected === true, lastPollAt: c.session?.last_poll_at ?? null, hours: HOURS, name: c.name }),
      table('Recent connects and disconnects', ['When', 'Change', 'Session', 'Generation'], conns.slice(0, 10).map((x) => [time(x.at), x.connected ? 'connected' : 'disconnected', h('code', {}, x.session_id), x.generation])),
    );
  }

  /** @param {{items: any[], truncated: boolean}} list @param {number | undefined} total */
  function drawDeployments(list, total) {
    const rows = list.items.map((d) => {
      const want = d.desired;
      const got = d.observed;
      const state = !want ? badge('not desired', 'off') : d.in_sync ? badge('in sync', 'ok') : badge('out of sync', 'warn');
      const refusal = d.last_refusal ? h('div', { class: 'warn-text' }, `refused: ${d.last_refusal.code}: ${d.last_refusal.message} `, time(d.last_refusal.at)) : null;
      const replicas = (got?.replica_ids ?? []).slice(0, 8).map((/** @type {string} */ r) =>
        h('div', { class: 'replica' }, h('code', {}, r), ' ', h('button', { type: 'button', class: 'small', 'data-key': `restart-${r}`, 'aria-label': `Restart replica ${r}`, onclick: guarded(`Restart replica ${r}?`, 'Restart', async () => follow(await startOperation(name, 'replica.restart', r, {}))) }, 'Restart')),
      );
      return [
        h('strong', {}, d.deployment_id),
        h('span', {}, state, refusal),
        want ? `${want.workload_id} · rev ${want.revision}` : '—',
        want ? `${want.min_replicas}–${want.max_replicas}` : '—',
        got ? `${got.ready_replicas} ready of ${got.replica_ids.length} · ${got.phase}${got.observed_revision === null ? '' : ` · rev ${got.observed_revision}`}` : 'not reported',
        got?.message || '—',
        replicas.length ? replicas : '—',
        h(
          'div',
          { class: 'actions' },
          want ? h('button', { type: 'button', class: 'small', 'data-key': `edit-${d.deployment_id}`, 'aria-label': `Edit ${d.deployment_id}`, onclick: () => dep.edit(d.deployment_id, want) }, 'Edit') : null,
          want
            ? h('button', { type: 'button', class: 'small danger', 'data-key': `withdraw-${d.deployment_id}`, 'aria-label': `Withdraw ${d.deployment_id}`, onclick: guarded(`Withdraw ${d.deployment_id} from ${name}? The operator stops its replicas.`, 'Withdraw', async () => { await call('DELETE', `${base}/deployments/${encodeURIComponent(d.deployment_id)}`); notify(`Withdrew ${d.deployment_id}.`); }) }, 'Withdraw')
            : null,
        ),
      ];
    });
    render(depsEl, listHead('Deployments', total, list), table('Deployments: desired next to observed', ['Deployment', 'State', 'Desired', 'Replicas wanted', 'Observed', 'Message', 'Replica ids', 'Actions'], rows, 'none desired or reported.'));
  }

  /** @param {{items: any[], truncated: boolean}} list @param {number | undefined} total */
  function drawNodes(list, total) {
    const op = (/** @type {string} */ kind, /** @type {string} */ node, /** @type {string} */ label, danger = false) =>
      h('button', {
        type: 'button',
        class: danger ? 'small danger' : 'small',
        'data-key': `${kind}-${node}`,
        'aria-label': `${label} node ${node}`,
        onclick: danger ? guarded(`${label} node ${node}? Its replicas are moved off it.`, label, async () => follow(await startOperation(name, kind, node, {}))) : async () => follow(await startOperation(name, kind, node, {}).catch((e) => (notify(String(e.message), 'bad'), ''))),
      }, label);
    const rows = list.items.map((n) => [
      h('strong', {}, n.name),
      n.ready ? badge('ready', 'ok') : badge('not ready', 'bad'),
      n.schedulable ? 'schedulable' : badge('cordoned', 'warn'),
      `${n.devices} / ${n.allocatable.gpus}`,
      `${Math.round(n.allocatable.cpu_millis / 1000)} CPU · ${Math.round(n.allocatable.memory_mb / 1024)} GiB`,
      h('div', { class: 'actions' }, n.schedulable ? op('node.cordon', n.node_id, 'Cordon') : op('node.uncordon', n.node_id, 'Uncordon'), op('node.drain', n.node_id, 'Drain', true)),
    ]);
    render(nodesEl, listHead('Nodes', total, list), table('Nodes', ['Node', 'Ready', 'Scheduling', 'GPUs reported / allocatable', 'Allocatable', 'Actions'], rows, 'none reported.'));
  }

  /**
   * @param {{items: any[], truncated: boolean}} list
   * @param {{gpus: number, gpus_by_model: {model: string, count: number, unhealthy: number}[], gpus_other_models?: {models: number, count: number, unhealthy: number}} | undefined} counts
   */
  function drawGpus(list, counts) {
    const devices = list.items;
    /** @type {Map<string, {model: string, count: number, unhealthy: number}>} */
    const models = new Map();
    for (const d of devices) {
      const m = models.get(d.model) ?? { model: d.model, count: 0, unhealthy: 0 };
      m.count++;
      if (d.health !== 'healthy') m.unhealthy++;
      models.set(d.model, m);
    }
    const unhealthy = devices.filter((d) => d.health !== 'healthy');
    const caption = list.truncated ? `GPUs that are not healthy, among the first ${devices.length} listed` : 'GPUs that are not healthy';
    render(
      gpusEl,
      listHead('GPUs', counts?.gpus, list),
      // The hub's counts cover every GPU; the listed ones only as many as were read.
      gpuBars(counts?.gpus_by_model ?? [...models.values()], `GPUs by model on ${name}`, counts?.gpus_other_models),
      table(caption, ['GPU', 'Node', 'Model', 'Health'], unhealthy.map((d) => [h('code', {}, d.device_id), d.node_id, d.model, badge(d.health, 'bad')]), 'every GPU is healthy.'),
    );
  }

  /**
   * An operation's progress as the hub answers it: a long history is its first and latest 100
   * entries, with the count left out between them, said where they are missing (numbered on
   * after them) rather than drawn as one unbroken list.
   * @param {any[]} history @param {number} omitted @param {boolean} [atLeast] more were left out than the hub counts
   */
  function historyItems(history, omitted, atLeast = false) {
    const items = history.map((/** @type {any} */ e) => h('li', {}, time(e.at), ` ${e.kind}${e.phase ? ` (${e.phase})` : ''}: ${e.message}`));
    if (!(omitted > 0)) return items;
    const gapAt = Math.max(0, history.length - HISTORY_LATEST);
    const after = items[gapAt];
    // Past the hub's count the latest entries' place is not known: they go unnumbered then.
    if (after && !atLeast) after.setAttribute('value', String(gapAt + omitted + 1));
    const many = atLeast ? `at least ${omitted} entries` : `${omitted} ${omitted === 1 ? 'entry' : 'entries'}`;
    items.splice(gapAt, 0, h('li', { class: 'history-gap' }, `… ${many} not shown (the hub keeps the first and the latest ${HISTORY_LATEST}) …`));
    if (atLeast) for (const li of items.slice(gapAt + 1)) li.classList.add('unnumbered');
    return items;
  }

  /** @param {any[]} ops @param {any[]} details */
  function drawOps(ops, details) {
    const stateTone = (/** @type {string} */ s) => (s === 'succeeded' ? 'ok' : CONCLUDED.has(s) ? 'bad' : 'warn');
    render(
      opsEl,
      h('h3', {}, 'Operations'),
      table('Recent operations', ['Started', 'Kind', 'Target', 'State', 'Result'], ops.map((o) => [time(o.created_at), o.kind, h('code', {}, o.target), badge(o.state, stateTone(o.state)), o.outcome_message ?? '—']), 'none yet.'),
    );
    render(
      followEl,
      details.map((d) =>
        h(
          'div',
          { class: 'follow' },
          h('h4', {}, `${d.kind} ${d.target}: `, badge(d.state, stateTone(d.state))),
          h('ol', { class: 'history' }, historyItems(d.history ?? [], d.history_omitted ?? 0, d.history_omitted_at_least === true)),
        ),
      ),
    );
  }

  const root = h(
    'div',
    { class: 'view', 'aria-labelledby': 'cluster-h' },
    headEl,
    secretEl,
    h('div', { class: 'cols' }, sessionEl, h('div', {}, historyEl, gpusEl)),
    depsEl,
    h('section', { class: 'panel' }, dep.form),
    nodesEl,
    opsEl,
    h('section', { class: 'panel' }, opForm, followEl),
    h('div', { class: 'cols' }, eventsEl, rejEl),
  );

  return {
    title: name,
    root,
    /** @param {() => void} fn */
    onRefreshSoon(fn) {
      refreshSoon = fn;
    },
    async refresh() {
      const force = drawAll;
      drawAll = true;
      let cluster;
      try {
        cluster = await poll(base);
      } catch (err) {
        // A 400 naming the id: no cluster can have it (the link checks what it can; this is the hub's word).
        if (err instanceof ApiError && (err.status === 404 || (err.status === 400 && err.field === 'id'))) {
          render(headEl, notFound(name));
          return;
        }
        throw err;
      }
      const [deps, nodes, devices, events, rejections, ops, conns] = await Promise.all([
        pollAll(`${base}/deployments?limit=500`, { maxPages: LIST_PAGES }),
        pollAll(`${base}/nodes?limit=500`, { maxPages: LIST_PAGES }),
        pollAll(`${base}/devices?limit=500`, { maxPages: LIST_PAGES }),
        poll(`${base}/events?limit=20`),
        poll(`${base}/rejections?limit=20`),
        poll(`${base}/operations?limit=20`),
        poll(`${base}/connections?limit=200`),
      ]);
      const open = ops.data.items.filter((/** @type {any} */ o) => !CONCLUDED.has(o.state)).map((/** @type {any} */ o) => o.operation_id);
      const ids = [...new Set([...following, ...open])].slice(0, 5);
      const details = await Promise.all(ids.map((x) => poll(`/operations/${x}`)));
      const c = cluster.data;
      drawHead(c);
      drawSession(c);
      drawHistory(c, conns.data.items, conns.data.next_cursor != null);
      // The headings carry the hub's counts (in the cluster answer, which changes far more often
      // than they do): a list is redrawn when it or its count changed, not on every answer.
      const counts = c.counts;
      const countsKey = JSON.stringify(counts ?? null);
      const recount = countsKey !== lastCounts;
      lastCounts = countsKey;
      if (deps.changed || recount || force) drawDeployments(deps, counts?.deployments);
      if (nodes.changed || recount || force) drawNodes(nodes, counts?.nodes);
      if (devices.changed || recount || force) drawGpus(devices, counts);
      drawOps(ops.data.items, details.map((d) => d.data));
      render(eventsEl, h('h3', {}, 'Recent events'), table('Recent events', ['When', 'Kind', 'Subject', 'Severity', 'Reason', 'Message'], events.data.items.map((/** @type {any} */ e) => [time(e.received_at), e.kind, h('code', {}, e.subject), badge(e.severity, e.severity === 'info' ? 'ok' : e.severity === 'warning' ? 'warn' : 'bad'), e.reason, e.message])));
      render(rejEl, h('h3', {}, 'Rejections'), table('Rejected frames', ['When', 'Type', 'Seq', 'Reason'], rejections.data.items.map((/** @type {any} */ r) => [time(r.received_at), r.type, r.seq, r.reason]), 'none: every frame applied.'));
      drawAll = false;
    },
  };
}
