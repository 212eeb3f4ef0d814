// @ts-check
// The dashboard's entry: sign-in, the hash router (#/ the fleet, #/clusters/<name> a cluster)
// and the live loop, which re-polls the current view every second while the tab is visible.
import { forgetPolls, token, whenUnauthorized } from './api.js';
import { clusterView } from './cluster.js';
import { render } from './dom.js';
import { fleetView } from './fleet.js';

const POLL_MS = 1000;

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @typedef {{title: string, root: HTMLElement, refresh: () => Promise<void>, onRefreshSoon?: (fn: () => void) => void}} View */

/** @type {View | null} */
let current = null;
let timer = 0;
let running = false;
let again = false;

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
  try {
    if (document.visibilityState === 'visible') {
      await view.refresh();
      $('live').textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
      $('live').className = 'live ok';
    }
  } catch (err) {
    if (current === view) {
      $('live').textContent = `Hub unreachable, retrying (${err instanceof Error ? err.message : String(err)})`;
      $('live').className = 'live bad';
    }
  } finally {
    running = false;
  }
  // A view opened (or a refresh asked for) while this one ran goes now, not after a full period.
  if (again || current !== view) {
    again = false;
    void tick();
  } else timer = window.setTimeout(tick, POLL_MS);
}

function route() {
  if (!token.get()) return showSignIn('');
  $('signin').hidden = true;
  $('signed-in').hidden = false;
  const m = /^#\/clusters\/([^/]+)$/.exec(location.hash);
  forgetPolls();
  current = m ? clusterView(decodeURIComponent(m[1] ?? '')) : fleetView();
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
  if (!t) {
    $('signin-error').textContent = 'Enter the admin token printed by npm start (or set as ADMIN_TOKEN).';
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
