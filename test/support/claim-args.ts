/**
 * The arguments of a session's claim at hello (src/hub/db/ownership.ts) for a fresh session of a
 * registered cluster, as a test calls the claim directly: poll shard 0, contention at its defaults.
 */
import type { ClaimArgs } from '../../src/hub/db/ownership';
import { newId } from '../../src/protocol';

export function claimArgs(clusterUid: string, tokenHashHex: string, over: Partial<ClaimArgs> = {}): ClaimArgs {
  return {
    clusterUid,
    tokenHashHex,
    resume: null,
    freshSessionId: `${newId()}.${newId()}`,
    live: {},
    remoteAddr: null,
    operatorVersion: 'test',
    contention: { windowMs: 600_000, threshold: 3, quietMs: 600_000 },
    pollShard: 0,
    watermark: 0,
    ingestCommits: 0,
    ...over,
  };
}
