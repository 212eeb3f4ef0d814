/** [name, what a handler returned, how the SDK reads it] */
export const handlersNormalizeCases: [string, unknown, object][] = [
  ['{ok: true} is applied', { ok: true }, { ok: true }],
  ['transient keeps its reason', { ok: false, retryable: true, reason: 'db down' }, { ok: false, retryable: true, reason: 'db down' }],
  ['permanent keeps its code', { ok: false, retryable: false, reason: 'bad', code: 'conflict' }, { ok: false, retryable: false, code: 'conflict' }],
  ['permanent with an unknown code becomes invalid', { ok: false, retryable: false, reason: 'bad', code: 'teapot' }, { code: 'invalid' }],
  ['undefined is transient', undefined, { ok: false, retryable: true }],
  ['a bare true is transient', true, { ok: false, retryable: true }],
  ['{ok: false} without retryable is transient', { ok: false }, { ok: false, retryable: true }],
];
