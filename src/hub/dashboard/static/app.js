// @ts-check
// The dashboard's entry: sign-in, the hash router (#/ the fleet, #/clusters/<name> a cluster)
// and the live loop, which re-polls the current view every second while the tab is visible.
import { ApiError, endRefresh, forgetPolls, token, tokenProblem, whenUnauthorized } from './api.js';
import { clusterView, missingClusterView } from './cluster.js';
import { refreshTimes, render } from './dom.js';
import { fleetView } from './fleet.js';

const POLL_MS = 1000;

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @typedef {{title: string, root: HTMLElement, refresh: () => Promise<void>, onRefreshSoon?: (fn: () => void) => void}} View */

/** @type {View | null} */
let current = null;
let timer = 0;
let running = false;
let again = false;
/** When the open view last refreshed: what it shows is as of then. Null: not yet. */
/** @type {Date | null} */
let shownAsOf = null;

function showSignIn(/** @type {string} */ message) {
  clearTimeout(timer);
  current = null;
  render($('view'));
  $('signed-in').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = message;
  document.title = 'Sign in · Wingsmith Hub';
  /** @type {HTMLInputElement} */ ($('token')).focus();
}

async function tick() {
  clearTimeout(timer);
  if (!current) return;
  if (running) {
    again = true;
    return;
  }
  running = true;
  const view = current;
  let wait = POLL_MS;
  try {
    if (document.visibilityState === 'visible') {
      await view.refresh();
      endRefresh();
      // A view left while this refresh ran: its answer vouches for nothing on screen now.
      if (current === view) {
        shownAsOf = new Date();
        $('live').textContent = `Live · updated ${shownAsOf.toLocaleTimeString()}`;
        $('live').className = 'live ok';
        $('view').classList.remove('stale');
      }
    }
  } catch (err) {
    if (current === view) {
      // What is on screen is the last answer, no longer the state: say since when, and dim the
      // state badges, so "connected" is not read as current during an outage.
      const asOf = shownAsOf ? ` · showing data as of ${shownAsOf.toLocaleTimeString()}` : '';
      // The hub says when to ask again (503: 5 s): every open dashboard polling each second
      // through an outage only adds to it.
      if (err instanceof ApiError && err.retryAfterMs > wait) wait = err.retryAfterMs;
      $('live').textContent = `${failureText(err)}, retrying${wait > POLL_MS ? ` in ${Math.round(wait / 1000)} s` : ''}${asOf}`;
      $('live').className = 'live bad';
      $('view').classList.add('stale');
    }
  } finally {
    running = false;
    // Relative times ("12 s ago") age even when no answer came.
    refreshTimes($('view'));
  }
  // A view opened (or a refresh asked for) while this one ran goes now, not after a full period.
  if (again || current !== view) {
    again = false;
    void tick();
  } else timer = window.setTimeout(tick, wait);
}

/** @param {unknown} err */
function failureText(err) {
  // The hub answered, and says its database is away: not a network problem on this side.
  if (err instanceof ApiError && err.code === 'unavailable') return 'Database unavailable (the hub answered 503)';
  if (err instanceof ApiError) return `The hub answered ${err.status} (${err.message})`;
  return `Hub unreachable (${err instanceof Error ? err.message : String(err)})`;
}

/**
 * The cluster a hash names: null for any other view, or why no cluster can have the name in the
 * link: not valid percent-encoding (decodeURIComponent throws on it, which would leave a blank
 * page), a dot segment (fetch would resolve /admin/clusters/. to the list, .. to /admin/), or what
 * the admin API refuses as an id (a U+0000, over 253 characters: a 400 the view would retry for
 * ever). `shown`: the name as the heading shows it, where the decoded one would not do.
 * @param {string} hash
 * @returns {null | { name: string } | { missing: string, shown?: string }}
 */
function clusterIn(hash) {
  const m = /^#\/clusters\/([^/]+)$/.exec(hash);
  if (!m) return null;
  let name;
  try {
    name = decodeURIComponent(m[1] ?? '');
  } catch {
    return { missing: 'The link is malformed (not valid percent-encoding).' };
  }
  if (name === '.' || name === '..') return { missing: 'No cluster can be named . or .. (cluster names are letters, digits and -).' };
  if (name.includes('\0')) return { missing: 'No cluster uid or name contains U+0000.', shown: m[1] ?? '' };
  if (name.length > MAX_CLUSTER_ID) return { missing: `No cluster uid or name is longer than ${MAX_CLUSTER_ID} characters.` };
  return { name };
}

/** The longest cluster uid or name the admin API takes (its `ClusterIdParam`). */
const MAX_CLUSTER_ID = 253;

/** @param {string} raw */
function decodedOr(raw) {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function route() {
  if (!token.get()) return showSignIn('');
  $('signin').hidden = true;
  $('signed-in').hidden = false;
  const name = clusterIn(location.hash);
  forgetPolls();
  shownAsOf = null;
  $('view').classList.remove('stale');
  current =
    name === null ? fleetView() : 'missing' in name ? missingClusterView(name.shown ?? decodedOr(location.hash.slice('#/clusters/'.length)), name.missing) : clusterView(name.name);
  current.onRefreshSoon?.(() => void tick());
  document.title = `${current.title} · Wingsmith Hub`;
  render($('view'), current.root);
  $('main').focus();
  void tick();
}

whenUnauthorized((reason) => showSignIn(reason));

$('signin-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = /** @type {HTMLInputElement} */ ($('token'));
  const t = input.value.trim();
  const problem = tokenProblem(t);
  if (problem) {
    $('signin-error').textContent = problem;
    return;
  }
  token.set(t);
  input.value = '';
  route();
});

$('sign-out').addEventListener('click', () => {
  token.clear();
  showSignIn('Signed out.');
});

$('confirm').addEventListener('click', (e) => {
  // A click on the backdrop (outside the dialog's box) cancels.
  if (e.target === $('confirm')) /** @type {HTMLDialogElement} */ ($('confirm')).close('cancel');
});

window.addEventListener('hashchange', route);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') void tick();
});
route();
