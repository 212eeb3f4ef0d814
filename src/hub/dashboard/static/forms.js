// @ts-check
// The cluster view's forms: put a deployment, start an operation. Both send what the user typed
// to the admin API unchanged and show the API's own validation message next to the field it names.
import { ApiError, call } from './api.js';
import { h } from './dom.js';
import { clearFormErrors, confirmAction, field, notify, onSubmit, showFormError } from './ui.js';

/** @param {string} text one `KEY=VALUE` a line */
function pairs(text) {
  /** @type {Record<string, string>} */
  const out = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf('=');
    if (i < 0) out[t] = '';
    else out[t.slice(0, i)] = t.slice(i + 1);
  }
  return out;
}

/** A number input's value as the API should see it: a number when it parses, else the text (so the API names the field). */
/** @param {FormData} f @param {string} k */
function num(f, k) {
  const v = String(f.get(k) ?? '').trim();
  return v !== '' && Number.isFinite(Number(v)) ? Number(v) : v === '' ? null : v;
}

/**
 * @param {string} clusterId
 * @param {() => void} changed called after a successful write
 */
export function deploymentForm(clusterId, changed) {
  const form = h(
    'form',
    { novalidate: true, 'aria-labelledby': 'dep-h', class: 'grid-form' },
    h('h3', { id: 'dep-h' }, 'Put a deployment'),
    field('dep-deployment_id', 'Deployment id', { required: true, autocomplete: 'off' }),
    field('dep-workload_id', 'Workload id', { required: true, autocomplete: 'off' }),
    field('dep-min_replicas', 'Min replicas', { type: 'number', min: 0, value: 1, inputmode: 'numeric' }),
    field('dep-max_replicas', 'Max replicas', { type: 'number', min: 0, value: 1, inputmode: 'numeric' }),
    field('dep-engine', 'Engine', { value: 'vllm' }),
    field('dep-model', 'Model', { placeholder: 'meta-llama/Llama-3.1-8B' }),
    field('dep-image', 'Image', { placeholder: 'vllm/vllm-openai:v0.6.3' }),
    field('dep-gpus_per_replica', 'GPUs per replica', { type: 'number', min: 0, value: 1, inputmode: 'numeric' }),
    field('dep-gpu_model', 'GPU model (empty: any)', {}),
    field('dep-port', 'Port', { type: 'number', value: 8000, inputmode: 'numeric' }),
    h('div', { class: 'field wide' }, h('label', { for: 'dep-args' }, 'Arguments (one a line)'), h('textarea', { id: 'dep-args', name: 'args', rows: 2 })),
    h('div', { class: 'field wide' }, h('label', { for: 'dep-env' }, 'Environment (NAME=value, one a line)'), h('textarea', { id: 'dep-env', name: 'env', rows: 2 })),
    h('div', { class: 'actions wide' }, h('button', { type: 'submit' }, 'Put deployment')),
    h('p', { class: 'form-error wide', role: 'alert' }),
  );
  /**
   * What edit() put in each box and the value it stands for. The boxes' text is lossy (trimmed,
   * one arg or NAME=value a line, empty lines dropped), so an empty arg, a value with a space at
   * an end or a newline inside would come back changed from an edit that never touched it: a box
   * still showing what edit() put there sends the value as it was read.
   * @type {Map<string, {shown: string, value: unknown}>}
   */
  const filled = new Map();
  onSubmit(form, async () => {
    clearFormErrors(form);
    const f = new FormData(form);
    const str = (/** @type {string} */ k) => String(f.get(k) ?? '').trim();
    /** @template T @param {string} k @param {T} parsed */
    const kept = (k, parsed) => {
      const was = filled.get(k);
      const el = form.elements.namedItem(k);
      const shown = el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement ? el.value : null;
      return was && shown === was.shown ? was.value : parsed;
    };
    const id = str('deployment_id');
    if (!id) {
      // Worded and placed as the API's own refusals are: beside the field, not "Error: …" at the top.
      showFormError(form, new ApiError(400, 'invalid', 'deployment_id: required', 'deployment_id'));
      return;
    }
    const body = {
      workload_id: kept('workload_id', str('workload_id')),
      min_replicas: kept('min_replicas', num(f, 'min_replicas')),
      max_replicas: kept('max_replicas', num(f, 'max_replicas')),
      serving: {
        engine: kept('engine', str('engine')),
        model: kept('model', str('model')),
        image: kept('image', str('image')),
        args: kept('args', str('args') ? str('args').split('\n').map((a) => a.trim()).filter(Boolean) : []),
        env: kept('env', pairs(str('env'))),
        gpus_per_replica: kept('gpus_per_replica', num(f, 'gpus_per_replica')),
        gpu_model: kept('gpu_model', str('gpu_model') || null),
        port: kept('port', num(f, 'port')),
      },
    };
    try {
      const r = await call('PUT', `/clusters/${encodeURIComponent(clusterId)}/deployments/${encodeURIComponent(id)}`, body);
      notify(`Deployment ${id} stored at revision ${r.revision}; the operator is told now.`);
      changed();
    } catch (err) {
      showFormError(form, err);
    }
  });
  return {
    form,
    /** Fill the form from a deployment's desired side, to edit it. @param {string} id @param {any} d */
    edit(id, d) {
      /** @type {Record<string, unknown>} */
      const v = {
        deployment_id: id,
        workload_id: d.workload_id,
        min_replicas: d.min_replicas,
        max_replicas: d.max_replicas,
        ...(d.serving ?? {}),
        args: (d.serving?.args ?? []).join('\n'),
        env: Object.entries(d.serving?.env ?? {}).map(([k, x]) => `${k}=${x}`).join('\n'),
        gpu_model: d.serving?.gpu_model ?? '',
      };
      /** @type {Record<string, unknown>} */
      const read = { workload_id: d.workload_id, min_replicas: d.min_replicas, max_replicas: d.max_replicas, ...(d.serving ?? {}) };
      filled.clear();
      for (const [k, x] of Object.entries(v)) {
        const el = form.elements.namedItem(k);
        if (!(el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement)) continue;
        el.value = String(x ?? '');
        // As the box holds it (a textarea normalises line breaks), to compare at submit.
        if (read[k] !== undefined) filled.set(k, { shown: el.value, value: read[k] });
      }
      /** @type {HTMLInputElement} */ (form.elements.namedItem('deployment_id')).focus();
    },
  };
}

export const OPERATION_KINDS = ['node.drain', 'node.cordon', 'node.uncordon', 'replica.restart', 'model.prefetch'];
/** Kinds that disturb running replicas. */
const DESTRUCTIVE_KINDS = new Set(['node.drain', 'replica.restart']);

/**
 * @param {string} clusterId
 * @param {(operationId: string) => void} started
 */
export function operationForm(clusterId, started) {
  const form = h(
    'form',
    { novalidate: true, 'aria-labelledby': 'op-h', class: 'grid-form' },
    h('h3', { id: 'op-h' }, 'Start an operation'),
    h('div', { class: 'field' }, h('label', { for: 'op-kind' }, 'Kind'), h('select', { id: 'op-kind', name: 'kind' }, OPERATION_KINDS.map((k) => h('option', { value: k }, k)))),
    field('op-target', 'Target (node, replica or model)', { autocomplete: 'off' }),
    field('op-deadline_s', 'Deadline (seconds)', { type: 'number', value: 600, inputmode: 'numeric' }),
    h('div', { class: 'field wide' }, h('label', { for: 'op-params' }, 'Parameters (name=value, one a line)'), h('textarea', { id: 'op-params', name: 'params', rows: 2 })),
    h('div', { class: 'actions wide' }, h('button', { type: 'submit' }, 'Start operation')),
    h('p', { class: 'form-error wide', role: 'alert' }),
  );
  onSubmit(form, async () => {
    clearFormErrors(form);
    const f = new FormData(form);
    const kind = String(f.get('kind'));
    const target = String(f.get('target') ?? '').trim();
    // Destructive kinds ask first, as the buttons that start them do.
    if (DESTRUCTIVE_KINDS.has(kind) && !(await confirmAction(`Start ${kind} on ${target || '(no target)'}? ${kind === 'node.drain' ? 'Its replicas are moved off it.' : 'Its replica is restarted.'}`, 'Start'))) return;
    try {
      const r = await startOperation(clusterId, kind, target, pairs(String(f.get('params') ?? '')), num(f, 'deadline_s'));
      started(r);
    } catch (err) {
      showFormError(form, err);
    }
  });
  return form;
}

/**
 * @param {string} clusterId
 * @param {string} kind
 * @param {string} target
 * @param {Record<string, string>} params
 * @param {unknown} deadline_s
 * @returns {Promise<string>} the operation id
 */
export async function startOperation(clusterId, kind, target, params, deadline_s = 600) {
  const ask = JSON.stringify([clusterId, kind, target, params]);
  const key = unanswered.get(ask)?.key ?? crypto.randomUUID();
  unanswered.set(ask, { key, clusterId, target });
  let r;
  try {
    r = await call('POST', `/clusters/${encodeURIComponent(clusterId)}/operations`, { kind, target, params, deadline_s }, { 'idempotency-key': key });
  } catch (err) {
    // A refusal is the hub's decision; a lost answer, one that never came (the write's deadline,
    // status 0) or a 5xx may hide a start that committed.
    if (err instanceof ApiError && err.status >= 400 && err.status < 500) unanswered.delete(ask);
    throw err;
  }
  // A start on this target was made: any start of it whose answer was lost, committed or not,
  // is now behind this one, so asking for that again is a new request, not its retry. Its key
  // would make the hub answer with the old operation (keys match for ever) and start nothing:
  // cordon (answer lost), uncordon, cordon again left the node uncordoned, "started".
  for (const [k, v] of unanswered) if (v.clusterId === clusterId && v.target === target) unanswered.delete(k);
  notify(`Started ${kind} on ${target}; following it below.`);
  return r.operation_id;
}

/**
 * Idempotency keys of starts that got no answer, by what they asked for: asking again for the same
 * operation sends the same key, so a start the hub committed before its answer was lost is not
 * started twice (the hub answers with the first one), until another start on its target is made.
 * @type {Map<string, {key: string, clusterId: string, target: string}>}
 */
const unanswered = new Map();
