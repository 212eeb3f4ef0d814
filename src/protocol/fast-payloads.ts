/**
 * Hand-written validators for the frames an operator sends by the thousand (observed state,
 * removals, events, link counters). On Workers zod cannot compile its schemas (no `eval`), so
 * its interpreted checks cost more per frame than everything else the hub does with one; these
 * are straight-line code instead.
 *
 * The zod schemas in catalog.ts stay the contract. On every value `JSON.parse` can produce (the
 * only input `readFrame` hands them), each validator here accepts exactly what its schema
 * accepts and returns exactly what zod returns: the same fields in the same order, unknown ones
 * stripped, `__proto__` keys dropped the way zod drops them, lengths counted in code points as
 * zod counts them. test/unit/protocol/fast-payloads.property.test.ts proves it over generated
 * frames, with its generators read off the schemas, so a schema change that is not followed here
 * fails that test. A rejection names the field, as the zod path does (poison frames are logged
 * and recorded with it), a long key cut the same way (field-path.ts); its wording is this
 * module's own.
 */
import type { Payload } from './catalog';
import { namesTime, ULID_RE } from './envelope';
import { pathSegment } from './field-path';
import { DEPLOYMENT_PHASES, DEVICE_HEALTH, IDENT_RE, IDENT_RULE, LIMITS, MAX_REPLICAS, SEVERITIES, TAINT_EFFECTS } from './vocabulary';

export type FastResult<T> = { ok: true; value: T } | { ok: false; field: string; message: string };
export type FastValidator<T> = (input: unknown) => FastResult<T>;

type Obj = Record<string, unknown>;

// A nested check that fails returns BAD after setting these; only the outermost call allocates
// the failure result. Validation is synchronous, so one slot per isolate is enough.
const BAD: unique symbol = Symbol('bad');
type Bad = typeof BAD;
let badField = '';
let badMessage = '';

function bad(field: string, message: string): Bad {
  badField = field;
  badMessage = message;
  return BAD;
}

function failed<T>(): FastResult<T> {
  return { ok: false, field: badField, message: badMessage };
}

function fail<T>(field: string, message: string): FastResult<T> {
  return { ok: false, field, message };
}

// ---------------------------------------------------------------------------------------------
// Leaves. Each is a predicate; the message is worked out only once a value has failed.
// ---------------------------------------------------------------------------------------------

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return typeof v;
}

/** zod measures strings in code points (a surrogate pair is one character); a lone surrogate counts as one. */
function codePoints(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n--;
      i++;
    }
  }
  return n;
}

/** A string of at most `max` characters; counting code points only when the UTF-16 length is over. */
function isText(v: unknown, max: number): v is string {
  return typeof v === 'string' && (v.length <= max || codePoints(v) <= max);
}

/** A non-empty string of at most `max` characters. */
function isName(v: unknown, max: number): v is string {
  return isText(v, max) && v.length > 0;
}

function textProblem(v: unknown, min: number, max: number): string {
  if (typeof v !== 'string') return `expected a string, got ${kindOf(v)}`;
  if (v.length < min) return `must not be empty`;
  return `too long: at most ${max} characters`;
}

/** Identifiers: ASCII only, so UTF-16 length and code points agree. */
function isIdent(v: unknown): v is string {
  return typeof v === 'string' && v.length > 0 && v.length <= LIMITS.ident && IDENT_RE.test(v);
}

function identProblem(v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) return textProblem(v, 1, LIMITS.ident);
  if (v.length > LIMITS.ident && codePoints(v) > LIMITS.ident) return textProblem(v, 1, LIMITS.ident);
  return IDENT_RULE;
}

function isCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

function countProblem(v: unknown): string {
  if (typeof v !== 'number' || !Number.isFinite(v)) return `expected a number, got ${kindOf(v)}`;
  if (!Number.isInteger(v)) return 'expected an integer';
  return `out of range: an integer from 0 to ${Number.MAX_SAFE_INTEGER}`;
}

function oneOf(values: readonly string[]): (v: unknown) => boolean {
  const set = new Set<unknown>(values);
  return (v) => set.has(v);
}

const isHealth = oneOf(DEVICE_HEALTH);
const isPhase = oneOf(DEPLOYMENT_PHASES);
const isSeverity = oneOf(SEVERITIES);
const isEffect = oneOf(TAINT_EFFECTS);

function enumProblem(values: readonly string[]): string {
  return `expected one of ${values.join(', ')}`;
}

function isTimestamp(v: unknown): v is string {
  return typeof v === 'string' && v.length <= LIMITS.timestamp && namesTime(v);
}

function timestampProblem(v: unknown): string {
  return typeof v === 'string' ? 'must be an RFC 3339 timestamp' : `expected a string, got ${kindOf(v)}`;
}

function isBoolean(v: unknown): v is boolean {
  return typeof v === 'boolean';
}

// ---------------------------------------------------------------------------------------------
// Composites shared by several types.
// ---------------------------------------------------------------------------------------------

/**
 * Kubernetes labels. Like zod's record: own enumerable keys in their own order, `__proto__`
 * skipped (never checked, never copied), every other key and value checked, then the count.
 */
function labels(v: unknown, field: string): Record<string, string> | Bad {
  // zod asks for a plain object here; every JSON object is one.
  if (!isObject(v)) return bad(field, `expected an object, got ${kindOf(v)}`);
  const out: Record<string, string> = {};
  let n = 0;
  for (const key of Object.keys(v)) {
    if (key === '__proto__') continue;
    if (!isName(key, LIMITS.labelKey)) return bad(`${field}.${pathSegment(key)}`, `label key ${textProblem(key, 1, LIMITS.labelKey)}`);
    const value = v[key];
    if (!isText(value, LIMITS.labelValue)) return bad(`${field}.${pathSegment(key)}`, textProblem(value, 0, LIMITS.labelValue));
    out[key] = value;
    n++;
  }
  if (n > LIMITS.labels) return bad(field, `at most ${LIMITS.labels} labels`);
  return out;
}

type Taint = Payload<'node.observed'>['taints'][number];

function taints(v: unknown, field: string): Taint[] | Bad {
  if (!Array.isArray(v)) return bad(field, `expected an array, got ${kindOf(v)}`);
  // zod checks the elements first and the length after; either way the frame is refused.
  if (v.length > LIMITS.taints) return bad(field, `at most ${LIMITS.taints} taints`);
  const out: Taint[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const t: unknown = v[i];
    if (!isObject(t)) return bad(`${field}.${i}`, `expected an object, got ${kindOf(t)}`);
    const key = t.key;
    if (!isName(key, LIMITS.taintKey)) return bad(`${field}.${i}.key`, textProblem(key, 1, LIMITS.taintKey));
    // zod keeps a `value` key that is present, even as undefined, and adds none when absent.
    const hasValue = 'value' in t;
    const value = t.value;
    if (hasValue && value !== undefined && !isText(value, LIMITS.taintValue)) return bad(`${field}.${i}.value`, textProblem(value, 0, LIMITS.taintValue));
    const effect = t.effect;
    if (!isEffect(effect)) return bad(`${field}.${i}.effect`, enumProblem(TAINT_EFFECTS));
    out[i] = (hasValue ? { key, value, effect } : { key, effect }) as Taint;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The hot types.
// ---------------------------------------------------------------------------------------------

function notObject<T>(v: unknown): FastResult<T> {
  return fail('payload', `expected an object, got ${kindOf(v)}`);
}

function clusterObserved(p: unknown): FastResult<Payload<'cluster.observed'>> {
  if (!isObject(p)) return notObject(p);
  const { kubernetes_version, provider, region } = p;
  if (!isText(kubernetes_version, LIMITS.shortText)) return fail('kubernetes_version', textProblem(kubernetes_version, 0, LIMITS.shortText));
  if (!isText(provider, LIMITS.shortText)) return fail('provider', textProblem(provider, 0, LIMITS.shortText));
  if (!isText(region, LIMITS.shortText)) return fail('region', textProblem(region, 0, LIMITS.shortText));
  const l = labels(p.labels, 'labels');
  if (l === BAD) return failed();
  return { ok: true, value: { kubernetes_version, provider, region, labels: l } };
}

function nodeObserved(p: unknown): FastResult<Payload<'node.observed'>> {
  if (!isObject(p)) return notObject(p);
  const { node_id, name, ready, schedulable, allocatable } = p;
  if (!isIdent(node_id)) return fail('node_id', identProblem(node_id));
  if (!isText(name, LIMITS.shortText)) return fail('name', textProblem(name, 0, LIMITS.shortText));
  if (!isBoolean(ready)) return fail('ready', `expected a boolean, got ${kindOf(ready)}`);
  if (!isBoolean(schedulable)) return fail('schedulable', `expected a boolean, got ${kindOf(schedulable)}`);
  const l = labels(p.labels, 'labels');
  if (l === BAD) return failed();
  const t = taints(p.taints, 'taints');
  if (t === BAD) return failed();
  if (!isObject(allocatable)) return fail('allocatable', `expected an object, got ${kindOf(allocatable)}`);
  const { gpus, cpu_millis, memory_mb } = allocatable;
  if (!isCount(gpus)) return fail('allocatable.gpus', countProblem(gpus));
  if (!isCount(cpu_millis)) return fail('allocatable.cpu_millis', countProblem(cpu_millis));
  if (!isCount(memory_mb)) return fail('allocatable.memory_mb', countProblem(memory_mb));
  return {
    ok: true,
    value: { node_id, name, ready, schedulable, labels: l, taints: t, allocatable: { gpus, cpu_millis, memory_mb } },
  };
}

function deviceObserved(p: unknown): FastResult<Payload<'device.observed'>> {
  if (!isObject(p)) return notObject(p);
  const { device_id, node_id, vendor, model, memory_total_mb, health, driver_version } = p;
  if (!isIdent(device_id)) return fail('device_id', identProblem(device_id));
  if (!isIdent(node_id)) return fail('node_id', identProblem(node_id));
  if (!isText(vendor, LIMITS.shortText)) return fail('vendor', textProblem(vendor, 0, LIMITS.shortText));
  if (!isText(model, LIMITS.shortText)) return fail('model', textProblem(model, 0, LIMITS.shortText));
  if (!isCount(memory_total_mb)) return fail('memory_total_mb', countProblem(memory_total_mb));
  if (!isHealth(health)) return fail('health', enumProblem(DEVICE_HEALTH));
  if (!isText(driver_version, LIMITS.shortText)) return fail('driver_version', textProblem(driver_version, 0, LIMITS.shortText));
  return {
    ok: true,
    value: { device_id, node_id, vendor, model, memory_total_mb, health, driver_version } as Payload<'device.observed'>,
  };
}

function deploymentObserved(p: unknown): FastResult<Payload<'deployment.observed'>> {
  if (!isObject(p)) return notObject(p);
  const { deployment_id, observed_revision, phase, ready_replicas, replica_ids, message } = p;
  if (!isIdent(deployment_id)) return fail('deployment_id', identProblem(deployment_id));
  if (observed_revision !== null && !isCount(observed_revision)) return fail('observed_revision', countProblem(observed_revision));
  if (!isPhase(phase)) return fail('phase', enumProblem(DEPLOYMENT_PHASES));
  if (!isCount(ready_replicas)) return fail('ready_replicas', countProblem(ready_replicas));
  if (!Array.isArray(replica_ids)) return fail('replica_ids', `expected an array, got ${kindOf(replica_ids)}`);
  if (replica_ids.length > MAX_REPLICAS) return fail('replica_ids', `at most ${MAX_REPLICAS} replicas`);
  const ids: string[] = new Array(replica_ids.length);
  for (let i = 0; i < replica_ids.length; i++) {
    const id: unknown = replica_ids[i];
    if (!isIdent(id)) return fail(`replica_ids.${i}`, identProblem(id));
    ids[i] = id;
  }
  if (!isText(message, LIMITS.message)) return fail('message', textProblem(message, 0, LIMITS.message));
  if (ids.length > 1 && new Set(ids).size !== ids.length) return fail('replica_ids', 'replica_ids must not repeat');
  if (ready_replicas > ids.length) return fail('ready_replicas', 'ready_replicas exceeds the replicas named');
  return {
    ok: true,
    value: { deployment_id, observed_revision, phase, ready_replicas, replica_ids: ids, message } as Payload<'deployment.observed'>,
  };
}

// One function per type, not one made by a factory: a shared function reading `p[key]` with three
// keys and building `{ [key]: id }` is several times slower once all three types go through it.
function nodeRemoved(p: unknown): FastResult<Payload<'node.removed'>> {
  if (!isObject(p)) return notObject(p);
  const node_id = p.node_id;
  if (!isIdent(node_id)) return fail('node_id', identProblem(node_id));
  return { ok: true, value: { node_id } };
}

function deviceRemoved(p: unknown): FastResult<Payload<'device.removed'>> {
  if (!isObject(p)) return notObject(p);
  const device_id = p.device_id;
  if (!isIdent(device_id)) return fail('device_id', identProblem(device_id));
  return { ok: true, value: { device_id } };
}

function deploymentRemoved(p: unknown): FastResult<Payload<'deployment.removed'>> {
  if (!isObject(p)) return notObject(p);
  const deployment_id = p.deployment_id;
  if (!isIdent(deployment_id)) return fail('deployment_id', identProblem(deployment_id));
  return { ok: true, value: { deployment_id } };
}

function event(p: unknown): FastResult<Payload<'node.event'>> {
  if (!isObject(p)) return notObject(p);
  const { subject, reason, message, severity, occurred_at } = p;
  if (!isIdent(subject)) return fail('subject', identProblem(subject));
  if (!isName(reason, LIMITS.eventReason)) return fail('reason', textProblem(reason, 1, LIMITS.eventReason));
  if (!isText(message, LIMITS.message)) return fail('message', textProblem(message, 0, LIMITS.message));
  if (!isSeverity(severity)) return fail('severity', enumProblem(SEVERITIES));
  if (!isTimestamp(occurred_at)) return fail('occurred_at', timestampProblem(occurred_at));
  return { ok: true, value: { subject, reason, message, severity, occurred_at } as Payload<'node.event'> };
}

function linkStats(p: unknown): FastResult<Payload<'link.stats'>> {
  if (!isObject(p)) return notObject(p);
  const { epoch, dropped_events, evicted_frames, replaced_frames } = p;
  if (typeof epoch !== 'string' || !ULID_RE.test(epoch)) {
    return fail('epoch', typeof epoch === 'string' ? 'must be a ULID' : `expected a string, got ${kindOf(epoch)}`);
  }
  if (!isCount(dropped_events)) return fail('dropped_events', countProblem(dropped_events));
  if (!isCount(evicted_frames)) return fail('evicted_frames', countProblem(evicted_frames));
  if (!isCount(replaced_frames)) return fail('replaced_frames', countProblem(replaced_frames));
  const value: Payload<'link.stats'> = { epoch, dropped_events, evicted_frames, replaced_frames };
  // The optional counts, added after the first release. A key present, even as undefined, is
  // kept (zod keeps it), in the schema's order.
  for (const key of ['handler_failures', 'dropped_progress'] as const) {
    if (!(key in p)) continue;
    const v = p[key];
    if (v !== undefined && !isCount(v)) return fail(key, countProblem(v));
    value[key] = v as number | undefined;
  }
  return { ok: true, value };
}

/** The operator types sent by the thousand: these skip zod; every other type goes through it. */
export const HOT_TYPES = [
  'cluster.observed',
  'node.observed',
  'node.removed',
  'device.observed',
  'device.removed',
  'deployment.observed',
  'deployment.removed',
  'node.event',
  'device.event',
  'deployment.event',
  'link.stats',
] as const;
export type HotType = (typeof HOT_TYPES)[number];

export const FAST_PAYLOADS: { readonly [T in HotType]: FastValidator<Payload<T>> } = {
  'cluster.observed': clusterObserved,
  'node.observed': nodeObserved,
  'node.removed': nodeRemoved,
  'device.observed': deviceObserved,
  'device.removed': deviceRemoved,
  'deployment.observed': deploymentObserved,
  'deployment.removed': deploymentRemoved,
  'node.event': event,
  'device.event': event,
  'deployment.event': event,
  'link.stats': linkStats,
};

export function isHotType(type: string): type is HotType {
  return Object.prototype.hasOwnProperty.call(FAST_PAYLOADS, type);
}
