/**
 * The micro benchmark's cases, runtime-agnostic so Node (bench/micro/validate.ts) and workerd
 * (bench/micro/worker.ts) run exactly the same code:
 *
 * - validation per frame of each hot operator type: zod (the schema, as `decodePayload` ran it
 *   before) against the hand-written validator (src/protocol/fast-payloads.ts); and a whole
 *   `readFrame` (JSON.parse, envelope, payload, frame checks) before and after;
 * - one 2,000-frame device.observed batch: building it (`buildBatch`) and serializing the ingest
 *   statement's parameters, before (objects, a JSON.stringify of each table) and after
 *   (`ingestParams`: positional rows).
 */
import {
  buildFrame,
  decodeEnvelope,
  decodePayload,
  decodePayloadWithZod,
  EnvelopeSchema,
  envelopeProblem,
  frameProblem,
  newId,
  readFrame,
  type Envelope,
  type MessageType,
  type Payload,
  type TypedMessage,
} from '../../src/protocol';
import { FAST_PAYLOADS, HOT_TYPES, type HotType } from '../../src/protocol/fast-payloads';
import { ingestParams, type SessionFence } from '../../src/hub/db/ingest';
import { buildBatch, type IngestBatch, type InboundItem } from '../../src/hub/session/ingest-batch';
import { deploymentObserved, device, node } from '../lib/payloads';

export interface Timing {
  /** Median over the runs, ns per unit (frame). */
  ns: number;
  runs: number[];
}

/** Median ns per unit of `fn` (which handles `units` units per call), over `runs` runs of at least `minMs` each. */
export function measure(fn: () => unknown, units: number, runs = 7, minMs = 150): Timing {
  let sink = 0;
  for (let i = 0, t0 = performance.now(); performance.now() - t0 < minMs / 2; i++) sink += fn() === undefined ? 0 : 1;
  const out: number[] = [];
  for (let r = 0; r < runs; r++) {
    let calls = 0;
    const t0 = performance.now();
    let t = t0;
    while (t - t0 < minMs) {
      for (let i = 0; i < 8; i++) sink += fn() === undefined ? 0 : 1;
      calls += 8;
      t = performance.now();
    }
    out.push(((t - t0) * 1e6) / (calls * units));
  }
  if (sink < 0) throw new Error('unreachable');
  const sorted = [...out].sort((a, b) => a - b);
  return { ns: sorted[sorted.length >> 1]!, runs: out };
}

// ---------------------------------------------------------------------------------------------
// Frames.
// ---------------------------------------------------------------------------------------------

const TS = '2026-08-19T14:02:11.482Z';

/** A valid payload of `type`, the i-th of a run of distinct subjects. */
export function payloadOf(type: HotType, i: number): unknown {
  switch (type) {
    case 'cluster.observed':
      return { kubernetes_version: 'v1.31.2', provider: 'gke', region: 'us-east4', labels: { 'wingsmith.dev/tier': 'production', shard: String(i % 16) } };
    case 'node.observed':
      return node(i);
    case 'node.removed':
      return { node_id: `node-${i}` };
    case 'device.observed':
      return device(i);
    case 'device.removed':
      return { device_id: device(i).device_id };
    case 'deployment.observed':
      return deploymentObserved(i);
    case 'deployment.removed':
      return { deployment_id: `dep-${i}` };
    case 'node.event':
    case 'device.event':
    case 'deployment.event':
      return { subject: `node-${i}`, reason: 'NodeNotReady', message: 'kubelet stopped posting node status', severity: 'warning', occurred_at: TS };
    case 'link.stats':
      return { epoch: '01J9WZY0000000000000000000', dropped_events: i, evicted_frames: 3, replaced_frames: 840, handler_failures: 2 };
  }
}

const SAMPLES = 256;

export function framesOf(type: HotType): string[] {
  return Array.from({ length: SAMPLES }, (_, i) =>
    buildFrame({ type, payload: payloadOf(type, i) as Payload<typeof type>, seq: i + 1, id: newId(), ack: 0 }),
  );
}

/** readFrame as it was before the fast paths: zod for the envelope and for every payload. */
export function readFrameBefore(text: string): { kind: string } {
  const raw = JSON.parse(text) as unknown;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return { kind: 'fatal' };
  const parsed = EnvelopeSchema.safeParse(raw);
  if (!parsed.success) return { kind: 'fatal' };
  const e = parsed.data;
  const envelope: Envelope = {
    v: e.v,
    type: e.type,
    id: typeof e.id === 'string' ? e.id : '',
    seq: e.seq ?? null,
    ack: e.ack ?? null,
    reply_to: typeof e.reply_to === 'string' ? e.reply_to : null,
    ts: typeof e.ts === 'string' ? e.ts : '',
    payload: e.payload,
  };
  const problem = frameProblem(envelope);
  const payload = decodePayloadWithZod(envelope.type as MessageType, envelope.payload);
  if (problem || !payload.ok) return { kind: 'poison' };
  // readFrame's scan for a `__proto__` key (the samples hold none, so only the scan runs).
  if (text.includes('__proto__') || text.includes('\\u')) return { kind: 'rescan' };
  return { kind: 'message', ...payload };
}

// ---------------------------------------------------------------------------------------------
// Suites.
// ---------------------------------------------------------------------------------------------

export interface ValidateRow {
  type: string;
  zod: number;
  fast: number;
}

/** ns per frame: zod vs the fast validator for every hot type, then whole frames before vs after. */
export function validateSuite(runs: number, minMs: number): { payloads: ValidateRow[]; frames: ValidateRow } {
  const payloads: ValidateRow[] = [];
  for (const type of HOT_TYPES) {
    const inputs = framesOf(type).map((t) => (JSON.parse(t) as { payload: unknown }).payload);
    let i = 0;
    const zod = measure(() => decodePayloadWithZod(type, inputs[i++ & (SAMPLES - 1)]), 1, runs, minMs);
    let j = 0;
    const fast = measure(() => FAST_PAYLOADS[type](inputs[j++ & (SAMPLES - 1)]), 1, runs, minMs);
    // Both must agree here, or the comparison is meaningless.
    for (const input of inputs) {
      if (!decodePayloadWithZod(type, input).ok || !decodePayload(type, input).ok) throw new Error(`${type}: a sample payload does not validate`);
    }
    payloads.push({ type, zod: zod.ns, fast: fast.ns });
  }
  // A mixed stream, weighted like a busy cluster: mostly GPUs, then nodes, deployments, events.
  const mix: HotType[] = ['device.observed', 'device.observed', 'device.observed', 'device.observed', 'node.observed', 'deployment.observed', 'node.event', 'device.observed'];
  const texts = mix.flatMap((t) => framesOf(t).slice(0, SAMPLES / mix.length));
  let k = 0;
  const before = measure(() => readFrameBefore(texts[k++ & (SAMPLES - 1)]!), 1, runs, minMs);
  let m = 0;
  const after = measure(() => readFrame(texts[m++ & (SAMPLES - 1)]!), 1, runs, minMs);
  return { payloads, frames: { type: 'readFrame, mixed observed stream', zod: before.ns, fast: after.ns } };
}

/** Where a device.observed frame's readFrame time goes now, ns per frame. */
export function partsSuite(runs: number, minMs: number): { part: string; ns: number }[] {
  const texts = framesOf('device.observed');
  const parsed = texts.map((t) => JSON.parse(t) as { payload: unknown } & Record<string, unknown>);
  const envelopes = texts.map((t) => {
    const d = decodeEnvelope(t);
    if (!d.ok) throw new Error(d.reason);
    return d.envelope;
  });
  let i = 0;
  const at = () => i++ & (SAMPLES - 1);
  const parts: [string, () => unknown][] = [
    ['JSON.parse of the frame', () => JSON.parse(texts[at()]!)],
    ['envelope checks (envelopeProblem)', () => envelopeProblem(parsed[at()]!)],
    ['frame checks (frameProblem: id and ts patterns, Date.parse)', () => frameProblem(envelopes[at()]!)],
    ['  of which Date.parse of ts', () => Date.parse(envelopes[at()]!.ts)],
    ['payload (fast validator)', () => FAST_PAYLOADS['device.observed'](parsed[at()]!.payload)],
    ['scan for a __proto__ key', () => texts[at()]!.includes('__proto__') || texts[i & (SAMPLES - 1)]!.includes('\\u')],
    ['readFrame, whole', () => readFrame(texts[at()]!)],
  ];
  return parts.map(([part, fn]) => ({ part, ns: measure(fn, 1, runs, minMs).ns }));
}

const FENCE: SessionFence = { clusterUid: '01J9X2E5G7QK8V3B0YHN4TZC6M', sessionId: 'session', generation: 1, tokenHash: 'ab'.repeat(32) };

/** The 2,000 device.observed frames of one full batch, decoded the old way (zod) and the new way. */
export function deviceItems(n: number, decode: 'zod' | 'fast'): InboundItem[] {
  const items: InboundItem[] = [];
  for (let i = 0; i < n; i++) {
    const payload = JSON.parse(JSON.stringify(device(i))) as unknown;
    const d = decode === 'zod' ? decodePayloadWithZod('device.observed', payload) : decodePayload('device.observed', payload);
    if (!d.ok) throw new Error('bad device payload');
    items.push({ seq: i + 1, id: newId(), replyTo: null, type: 'device.observed', arrivedAt: 0, kind: 'message', message: d.message as TypedMessage });
  }
  return items;
}

/** The parameters as applyIngestBatch built them before: one JSON.stringify of each table's objects. */
export function paramsBefore(fence: SessionFence, b: IngestBatch): unknown[] {
  return [
    fence.clusterUid,
    fence.sessionId,
    fence.generation,
    fence.tokenHash,
    JSON.stringify(b.cluster ? [b.cluster] : []),
    JSON.stringify(b.nodes),
    JSON.stringify(b.nodeDeletes),
    JSON.stringify(b.devices),
    JSON.stringify(b.deviceDeletes),
    JSON.stringify(b.deployments),
    JSON.stringify(b.deploymentDeletes),
    JSON.stringify(b.events),
    JSON.stringify(b.linkStats ? [b.linkStats] : []),
    JSON.stringify(b.operationUpdates),
    JSON.stringify(b.operationEvents),
    JSON.stringify(b.rejections),
    JSON.stringify(b.prunes),
    JSON.stringify(b.desiredRefusals),
  ];
}

export interface BatchRow {
  step: string;
  before: number;
  after: number;
}

const utf8 = new TextEncoder();

/** µs per 2,000-frame batch: build, serialize, and the UTF-8 bytes the driver writes. */
export function batchSuite(runs: number, minMs: number): { rows: BatchRow[]; bytes: { before: number; after: number } } {
  const N = 2_000;
  const zodItems = deviceItems(N, 'zod');
  const fastItems = deviceItems(N, 'fast');
  const us = (fn: () => unknown) => measure(fn, 1, runs, minMs).ns / 1e3;
  const bBefore = buildBatch(zodItems, {}).batch;
  const bAfter = buildBatch(fastItems, {}).batch;
  const size = (params: unknown[]) => params.reduce<number>((n, p) => n + (typeof p === 'string' ? utf8.encode(p).length : 0), 0);
  const rows: BatchRow[] = [
    { step: 'buildBatch', before: us(() => buildBatch(zodItems, {})), after: us(() => buildBatch(fastItems, {})) },
    { step: 'parameters (serialize)', before: us(() => paramsBefore(FENCE, bBefore)), after: us(() => ingestParams(FENCE, bAfter)) },
    {
      step: 'parameters → UTF-8 (as the driver writes them)',
      before: us(() => paramsBefore(FENCE, bBefore).map((p) => (typeof p === 'string' ? utf8.encode(p) : p))),
      after: us(() => ingestParams(FENCE, bAfter).map((p) => (typeof p === 'string' ? utf8.encode(p) : p))),
    },
    {
      step: 'build + serialize + UTF-8',
      before: us(() => paramsBefore(FENCE, buildBatch(zodItems, {}).batch).map((p) => (typeof p === 'string' ? utf8.encode(p) : p))),
      after: us(() => ingestParams(FENCE, buildBatch(fastItems, {}).batch).map((p) => (typeof p === 'string' ? utf8.encode(p) : p))),
    },
  ];
  return { rows, bytes: { before: size(paramsBefore(FENCE, bBefore)), after: size(ingestParams(FENCE, bAfter)) } };
}
