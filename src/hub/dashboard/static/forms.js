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
  onSubmit(form, async () => {
    clearFormErrors(form);
    const f = new FormData(form);
    const str = (/** @type {string} */ k) => String(f.get(k) ?? '').trim();
    const id = str('deployment_id');
    if (!id) {
      showFormError(form, Object.assign(new Error('deployment_id: required'), {}));
      return;
    }
    const body = {
      workload_id: str('workload_id'),
      min_replicas: num(f, 'min_replicas'),
      max_replicas: num(f, 'max_replicas'),
      serving: {
        engine: str('engine'),
        model: str('model'),
        image: str('image'),
        args: str('args') ? str('args').split('\n').map((a) => a.trim()).filter(Boolean) : [],
        env: pairs(str('env')),
        gpus_per_replica: num(f, 'gpus_per_replica'),
        gpu_model: str('gpu_model') || null,
        port: num(f, 'port'),
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
      for (const [k, x] of Object.entries(v)) {
        const el = form.elements.namedItem(k);
        if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement) el.value = String(x ?? '');
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
  const key = unanswered.get(ask) ?? crypto.randomUUID();
  unanswered.set(ask, key);
  let r;
  try {
    r = await call('POST', `/clusters/${encodeURIComponent(clusterId)}/operations`, { kind, target, params, deadline_s }, { 'idempotency-key': key });
  } catch (err) {
    // A refusal is the hub's decision; a lost answer or a 5xx may hide a start that committed.
    if (err instanceof ApiError && err.status < 500) unanswered.delete(ask);
    throw err;
  }
  unanswered.delete(ask);
  notify(`Started ${kind} on ${target}; following it below.`);
  return r.operation_id;
}

/**
 * Idempotency keys of starts that got no answer, by what they asked for: asking again for the same
 * operation sends the same key, so a start the hub committed before its answer was lost is not
 * started twice (the hub answers with the first one).
 * @type {Map<string, string>}
 */
const unanswered = new Map();
