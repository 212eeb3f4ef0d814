// @ts-check
// Shared interaction pieces: confirmation for destructive actions, notices, form errors as the
// API words them, a shown-once secret with a copy button.
import { ApiError } from './api.js';
import { h } from './dom.js';

/**
 * Ask before a destructive action, in a modal dialog (focus moves into it; Escape cancels).
 * @param {string} question
 * @param {string} confirmLabel
 * @returns {Promise<boolean>}
 */
export function confirmAction(question, confirmLabel) {
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('confirm'));
  const text = /** @type {HTMLElement} */ (document.getElementById('confirm-text'));
  const ok = /** @type {HTMLButtonElement} */ (document.getElementById('confirm-ok'));
  text.textContent = question;
  ok.textContent = confirmLabel;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true }));
}

/**
 * A message in the page's live region (announced by screen readers).
 * @param {string} message
 * @param {'ok' | 'bad'} [tone]
 */
export function notify(message, tone = 'ok') {
  const el = /** @type {HTMLElement} */ (document.getElementById('notice'));
  el.className = `notice ${tone}`;
  el.textContent = message;
}

/**
 * Show an API error on a form: next to the field it names when the form has it, else at the top.
 * @param {HTMLFormElement} form
 * @param {unknown} err
 */
export function showFormError(form, err) {
  clearFormErrors(form);
  const e = err instanceof ApiError ? err : null;
  const message = e ? e.message : String(err);
  // The field the API names, or the nearest input holding it: `serving.env.1BAD` is the
  // Environment box, `serving.args.3` the Arguments box, `params.x` the parameters box.
  const path = e?.field ? e.field.replace(/^serving\./, '').split('.') : [];
  /** @type {Element | null} */
  let input = null;
  for (let n = path.length; n > 0 && !input; n--) input = form.querySelector(`[name="${CSS.escape(path.slice(0, n).join('.'))}"]`);
  const out = /** @type {HTMLElement | null} */ (form.querySelector('.form-error'));
  if (input instanceof HTMLElement) {
    const id = `${input.id}-error`;
    input.setAttribute('aria-invalid', 'true');
    input.setAttribute('aria-describedby', id);
    input.after(h('span', { id, class: 'field-error' }, message));
    input.focus();
  }
  if (out) out.textContent = message;
}

/**
 * Handle a form's submits one at a time: while one is being answered, another (a double click,
 * Enter pressed twice) is ignored and the submit buttons are disabled. A second register answers
 * "already exists" beside the token the first just issued, and a second PUT is a second revision.
 * @param {HTMLFormElement} form
 * @param {(e: SubmitEvent) => Promise<void>} handler
 */
export function onSubmit(form, handler) {
  let busy = false;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (busy) return;
    busy = true;
    const buttons = /** @type {HTMLButtonElement[]} */ ([...form.querySelectorAll('button[type="submit"]')]);
    for (const b of buttons) b.disabled = true;
    form.setAttribute('aria-busy', 'true');
    try {
      await handler(/** @type {SubmitEvent} */ (e));
    } finally {
      busy = false;
      for (const b of buttons) b.disabled = false;
      form.removeAttribute('aria-busy');
    }
  });
}

/** @param {HTMLFormElement} form */
export function clearFormErrors(form) {
  for (const el of form.querySelectorAll('.field-error')) el.remove();
  for (const el of form.querySelectorAll('[aria-invalid]')) {
    el.removeAttribute('aria-invalid');
    el.removeAttribute('aria-describedby');
  }
  const out = form.querySelector('.form-error');
  if (out) out.textContent = '';
}

/**
 * A labelled input.
 * @param {string} id
 * @param {string} label
 * @param {import('./dom.js').Attrs} [attrs]
 */
export function field(id, label, attrs = {}) {
  return h('div', { class: 'field' }, h('label', { for: id }, label), h('input', { id, name: id.replace(/^[a-z]+-/, ''), ...attrs }));
}

/**
 * A secret shown once (an enrollment token) with a copy button and the command to paste.
 * @param {string} title
 * @param {string} tokenValue
 * @param {string} command
 */
export function secretPanel(title, tokenValue, command) {
  const copy = (/** @type {string} */ text, /** @type {string} */ what) => async (/** @type {Event} */ e) => {
    try {
      await navigator.clipboard.writeText(text);
      notify(`${what} copied to the clipboard.`);
    } catch {
      // No clipboard access (an insecure origin, a browser that refuses): select the text
      // instead, so one keystroke copies it.
      const code = /** @type {HTMLElement} */ (e.target).closest('.copyline')?.querySelector('code');
      if (code) getSelection()?.selectAllChildren(code);
      notify(`The browser did not allow copying: the ${what.toLowerCase()} is selected, press Ctrl-C (⌘-C) to copy it.`, 'bad');
    }
  };
  return h(
    'div',
    { class: 'secret', role: 'region', 'aria-label': title },
    h('h3', {}, title),
    h('p', {}, 'Shown once: the hub keeps only a hash. Copy it now.'),
    h('div', { class: 'copyline' }, h('code', { class: 'token' }, tokenValue), h('button', { type: 'button', onclick: copy(tokenValue, 'Token') }, 'Copy token')),
    h('p', {}, 'Run an operator with it (the simulated one shown):'),
    h('div', { class: 'copyline' }, h('code', {}, command), h('button', { type: 'button', onclick: copy(command, 'Command') }, 'Copy command')),
  );
}

/** @param {string} name @param {string} tokenValue */
export function operatorCommand(name, tokenValue) {
  return `npm run sim -- --hub ${location.origin} --token ${tokenValue} --cluster ${name}`;
}
