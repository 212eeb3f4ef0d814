// The words and bounds the payload schemas (catalog.ts) are made of. They live apart from the
// schemas so that the hand-written validators of the hot operator frames (fast-payloads.ts) read
// the very same values without importing catalog.ts, which imports them.

/** Identifiers of nodes, GPUs, deployments, replicas: unique within a cluster, URL-path safe. */
export const IDENT_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
export const IDENT_RULE = 'must start with a letter or digit and use only A-Z a-z 0-9 . _ : -';

/**
 * Length bounds, in characters as zod counts them (Unicode code points), and count bounds. Every
 * field is attacker-controlled on the receiving side: bounded lengths and counts keep one frame's
 * cost small and predictable.
 */
export const LIMITS = {
  ident: 253,
  shortText: 256,
  message: 2048,
  timestamp: 64,
  labelKey: 317,
  labelValue: 256,
  labels: 128,
  taintKey: 317,
  taintValue: 256,
  taints: 64,
  eventReason: 128,
} as const;

export const MAX_REPLICAS = 4096;

/**
 * The smallest `max_frame_bytes` a hub may advertise and an operator will follow. Below it even a
 * hello or a small node's state would not fit, and a peer following it would refuse every frame
 * one at a time, a wedge that looks like silence; it guards against absurd values, not a tuning.
 */
export const MIN_FRAME_LIMIT_BYTES = 4096;

/**
 * The largest `max_frame_bytes` a hub may advertise and an operator will follow: the largest
 * WebSocket message a Durable Object receives (32 MiB, Cloudflare's published limit), which the
 * SDK's socket also takes no more than. Past it, a frame the limit allows is cut by a runtime, not
 * refused by the peer, and a hub frame that large would close the operator's own socket 1009 in
 * every session.
 */
export const MAX_FRAME_LIMIT_BYTES = 32 << 20;

export const RESYNC_KINDS = ['cluster', 'node', 'device', 'deployment'] as const;

/**
 * What `resync.begin.scope` may name beyond `RESYNC_KINDS`: a kind a newer peer streams (a type's
 * prefix, lower case), read and left out of the prune, as an unknown type is dropped rather than
 * fatal. At most `RESYNC_SCOPE_MAX` kinds, each named once.
 */
export const RESYNC_KIND_RE = /^[a-z][a-z0-9_]{0,31}$/;
export const RESYNC_SCOPE_MAX = 16;
export const TAINT_EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'] as const;
export const DEVICE_HEALTH = ['healthy', 'degraded', 'unhealthy', 'unknown'] as const;
export const DEPLOYMENT_PHASES = ['pending', 'progressing', 'ready', 'degraded', 'failed', 'terminating'] as const;
export const SEVERITIES = ['info', 'warning', 'error'] as const;
