/**
 * Worker vars that would break the hub at its first hello, wedge sessions, or make the operators
 * ignore what the welcome advertises are refused when the configuration is parsed (hubConfig,
 * src/hub/config.ts), naming the var, so `npm run check:deploy` and the first request fail
 * instead: a HUB_VERSION that is not a release (every hello would throw), a send queue too small
 * to carry a resync, liveness timers outside what the operator SDK accepts (boundedLimits), and a
 * desired page larger than the gateway's RPC carries. The first four tests came from a review and
 * failed before (each value was accepted); the rest pin the edges.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { checkDeployConfig } from '../../scripts/lib/deploy-config';
import { connectedStaleAfterMs, DESIRED_PAGE_RPC_BUDGET_BYTES, HISTORY_RETENTION_MAX_MS, hubConfig, IDLE_TIMEOUT_MAX_MS, PG_INT_MAX, PING_INTERVAL_BOUNDS_MS, REPLAY_BUFFER_MAX } from '../../src/hub/config';
import { claimPageBytes, REPLAY_ROW_MAX_BYTES } from '../../src/hub/frame-budget';
import { checkHello } from '../../src/hub/session/handshake';
import { boundedLimits } from '../../src/operator/handshake';
import { MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES } from '../../src/protocol';

const BASE = { HUB_VERSION: '0.1.0' };
const regionCfg = (vars: Record<string, string>) => hubConfig({ ...vars });

describe('hub configuration refused at startup', () => {
  it('HUB_VERSION that is not a release (x.y.z) is refused, not accepted until every hello throws', () => {
    // What happens now with HUB_VERSION = "1.0" (or "latest"): the config parses, check:deploy
    // passes, /healthz is ok, and every operator's hello throws inside checkOperatorVersion
    // ("plane release line ... is not release-shaped"), so no operator can ever connect.
    const hello = readFileSync(new URL('../../fixtures/hello.json', import.meta.url), 'utf8');
    const cluster = { uid: 'gpu-east-1', name: 'gpu-east-1' };
    expect(checkHello(hello, cluster, '0.1.0').ok).toBe(true);
    expect(() => checkHello(hello, cluster, '1.0')).toThrow(/not release-shaped/); // a valid hello, under HUB_VERSION "1.0"
    for (const v of ['1.0', 'latest']) {
      expect(() => hubConfig({ ...BASE, HUB_VERSION: v }), `HUB_VERSION=${v}`).toThrow(/HUB_VERSION/);
    }
    const raw = {
      name: 'wingsmith-hub',
      vars: { HUB_VERSION: '1.0' },
      durable_objects: { bindings: [{ name: 'SESSIONS', class_name: 'SessionObject' }, { name: 'DB_GATEWAY', class_name: 'DbGateway' }] },
      migrations: [{ tag: 'v1', new_sqlite_classes: ['SessionObject'] }, { tag: 'v2', new_sqlite_classes: ['DbGateway'] }],
    };
    expect(checkDeployConfig(raw).problems.join('\n')).toMatch(/HUB_VERSION/);
  });

  it('SEND_QUEUE_FRAMES too small to carry a resync (resync.begin, a deployment, stream.end) is refused', () => {
    // desired-pump.ts step(): page = min(DESIRED_PAGE_ROWS, SEND_QUEUE_FRAMES - queued - 2); with
    // 2 (or 1) it is 0 on an empty queue, step() returns false before even the resync.begin, and
    // the claim's snapshot is 0 rows (hello.ts): every fresh session is welcomed with
    // full_resync and never sent its resync. The bytes of the queue are checked at startup
    // (minSendQueueBytes); its frames are not.
    for (const n of ['1', '2']) {
      expect(() => hubConfig({ ...BASE, SEND_QUEUE_FRAMES: n }), `SEND_QUEUE_FRAMES=${n}`).toThrow(/SEND_QUEUE_FRAMES/);
    }
  });

  it('an idle limit the operator SDK cannot keep (IDLE_TIMEOUT_MS under two ping intervals) is refused', () => {
    // The hub closes a session silent for IDLE_TIMEOUT_MS (4408); an idle operator is heard only
    // by its pings. With PING_INTERVAL_MS 10000 and IDLE_TIMEOUT_MS 5000 the SDK pings every 10 s
    // and replaces the advertised idle limit by the spec's 30 s (boundedLimits: the limit must
    // be at least twice the ping interval), so the hub cuts every idle, healthy session every
    // few seconds, and it reconnects, forever.
    const cfgText = { ...BASE, PING_INTERVAL_MS: '10000', IDLE_TIMEOUT_MS: '5000' };
    const { adjusted } = boundedLimits({ ping_interval_s: 10, idle_timeout_s: 5, max_frame_bytes: 1 << 20, replay_buffer_frames: 1, replay_buffer_bytes: 1 });
    expect(adjusted.map((a) => a.field)).toEqual(['idle_timeout_s']); // what the SDK does with it
    expect(() => hubConfig(cfgText)).toThrow(/IDLE_TIMEOUT_MS|PING_INTERVAL_MS/);
  });

  it('SEND_QUEUE_BYTES must hold two of the largest frames the hub sends: 2 × min(MAX_FRAME_BYTES, 1.9 MB) + 64 KiB (README)', () => {
    const floor = (max: number) => 2 * Math.min(max, 1_900_000) + (64 << 10);
    for (const max of [1 << 16, 1 << 20, 8 << 20]) {
      expect(hubConfig({ ...BASE, MAX_FRAME_BYTES: String(max), SEND_QUEUE_BYTES: String(floor(max)) }).SEND_QUEUE_BYTES, String(max)).toBe(floor(max));
      expect(() => hubConfig({ ...BASE, MAX_FRAME_BYTES: String(max), SEND_QUEUE_BYTES: String(floor(max) - 1) }), String(max)).toThrow(/SEND_QUEUE_BYTES/);
    }
  });

  it('DESIRED_PAGE_BYTES beyond what the gateway RPC carries (32 MiB) is refused', () => {
    // Desired-state pages are read through the gateway shards (the pump's sql is gatewaySql) and
    // come back over Durable Object RPC, which refuses a value over 32 MiB. desiredPageBytes()
    // bounds a page by DESIRED_PAGE_BYTES "which keeps a page well inside the 32 MiB", but the
    // var itself has no upper bound: with a large send queue a cluster whose desired state
    // exceeds 32 MiB gets a page the RPC refuses, the pump logs a warning and retries the same
    // page at every poke, and its resync never completes.
    expect(() => hubConfig({ ...BASE, DESIRED_PAGE_BYTES: String(48 << 20), SEND_QUEUE_BYTES: String(256 << 20) })).toThrow(/DESIRED_PAGE_BYTES/);
  });

  it('HUB_VERSION: a release with a v, a pre-release or build part is accepted; over 128 characters is refused', () => {
    for (const v of ['0.1.0', 'v0.4.2', '1.2.3-rc.1', '2.0.0+build.5']) expect(hubConfig({ HUB_VERSION: v }).HUB_VERSION).toBe(v);
    expect(() => hubConfig({ HUB_VERSION: '' })).toThrow(/HUB_VERSION/);
    expect(() => hubConfig({ HUB_VERSION: `1.2.3-${'x'.repeat(128)}` })).toThrow(/HUB_VERSION: at most 128/);
  });

  it('SEND_QUEUE_FRAMES of 3 (begin, one deployment, end) is accepted', () => {
    expect(hubConfig({ ...BASE, SEND_QUEUE_FRAMES: '3' }).SEND_QUEUE_FRAMES).toBe(3);
  });

  it('the liveness timers the hub accepts are exactly those the operator SDK keeps as advertised', () => {
    const sdkAdjusts = (pingMs: number, idleMs: number) =>
      boundedLimits({ ping_interval_s: pingMs / 1000, idle_timeout_s: idleMs / 1000, max_frame_bytes: 1 << 20, replay_buffer_frames: 1, replay_buffer_bytes: 1 }).adjusted.length > 0;
    const [lo, hi] = PING_INTERVAL_BOUNDS_MS;
    const accepted: Array<[number, number]> = [[lo, 2 * lo], [1_000, 3_000], [3_000, 30_000], [hi, 2 * hi], [hi, IDLE_TIMEOUT_MAX_MS]];
    const refused: Array<[number, number, RegExp]> = [
      [lo - 1, 3_000, /PING_INTERVAL_MS/],
      [hi + 1, IDLE_TIMEOUT_MAX_MS, /PING_INTERVAL_MS/],
      [1_000, 1_999, /IDLE_TIMEOUT_MS: must be at least twice/],
      [hi, 2 * hi - 1, /IDLE_TIMEOUT_MS: must be at least twice/],
      [hi, IDLE_TIMEOUT_MAX_MS + 1, /IDLE_TIMEOUT_MS: must be at most/],
    ];
    for (const [ping, idle] of accepted) {
      expect(sdkAdjusts(ping, idle), `${ping}/${idle}`).toBe(false);
      expect(hubConfig({ PING_INTERVAL_MS: String(ping), IDLE_TIMEOUT_MS: String(idle) })).toMatchObject({ PING_INTERVAL_MS: ping, IDLE_TIMEOUT_MS: idle });
    }
    for (const [ping, idle, why] of refused) {
      expect(sdkAdjusts(ping, idle), `${ping}/${idle}`).toBe(true);
      expect(() => hubConfig({ PING_INTERVAL_MS: String(ping), IDLE_TIMEOUT_MS: String(idle) }), `${ping}/${idle}`).toThrow(why);
    }
    // The defaults are the spec's own values.
    expect(hubConfig({})).toMatchObject({ PING_INTERVAL_MS: 10_000, IDLE_TIMEOUT_MS: 30_000 });
  });

  it('the REPLAY_BUFFER_FRAMES and _BYTES the hub accepts are exactly the windows the operator SDK keeps as advertised', () => {
    const sdkAdjusts = (frames: number, bytes: number) =>
      boundedLimits({ ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: 1 << 20, replay_buffer_frames: frames, replay_buffer_bytes: bytes }).adjusted.length > 0;
    const { frames: maxFrames, bytes: maxBytes } = REPLAY_BUFFER_MAX;
    for (const [frames, bytes] of [[1, 1], [50_000, 64 << 20], [maxFrames, maxBytes]] as const) {
      expect(sdkAdjusts(frames, bytes), `${frames}/${bytes}`).toBe(false);
      expect(hubConfig({ REPLAY_BUFFER_FRAMES: String(frames), REPLAY_BUFFER_BYTES: String(bytes) })).toMatchObject({ REPLAY_BUFFER_FRAMES: frames, REPLAY_BUFFER_BYTES: bytes });
    }
    expect(sdkAdjusts(maxFrames + 1, maxBytes)).toBe(true);
    expect(() => hubConfig({ REPLAY_BUFFER_FRAMES: String(maxFrames + 1) })).toThrow(/REPLAY_BUFFER_FRAMES: must be at most/);
    expect(sdkAdjusts(maxFrames, maxBytes + 1)).toBe(true);
    expect(() => hubConfig({ REPLAY_BUFFER_BYTES: String(maxBytes + 1) })).toThrow(/REPLAY_BUFFER_BYTES: must be at most/);
  });

  it('the MAX_FRAME_BYTES the hub accepts is exactly what the operator SDK follows as advertised: 4 KiB to 32 MiB (no larger WebSocket message reaches a Durable Object, nor the SDK\'s socket)', () => {
    const sdkAdjusts = (max: number) =>
      boundedLimits({ ping_interval_s: 10, idle_timeout_s: 30, max_frame_bytes: max, replay_buffer_frames: 1, replay_buffer_bytes: 1 }).adjusted.length > 0;
    for (const max of [MIN_FRAME_LIMIT_BYTES, 8192, 1 << 20, MAX_FRAME_LIMIT_BYTES]) {
      expect(sdkAdjusts(max), String(max)).toBe(false);
      expect(hubConfig({ MAX_FRAME_BYTES: String(max) }).MAX_FRAME_BYTES).toBe(max);
    }
    for (const max of [1, 100, MIN_FRAME_LIMIT_BYTES - 1]) {
      expect(sdkAdjusts(max), String(max)).toBe(true);
      expect(() => hubConfig({ MAX_FRAME_BYTES: String(max) }), String(max)).toThrow(/MAX_FRAME_BYTES: must be at least 4096/);
    }
    for (const max of [MAX_FRAME_LIMIT_BYTES + 1, 64 << 20]) {
      expect(sdkAdjusts(max), String(max)).toBe(true);
      expect(() => hubConfig({ MAX_FRAME_BYTES: String(max) }), String(max)).toThrow(/MAX_FRAME_BYTES: must be at most 33554432/);
    }
  });

  it('DESIRED_PAGE_BYTES is accepted up to the RPC budget less the largest frame and the reserve, and a claim page stays within it', () => {
    const frame = Math.min(1 << 20, REPLAY_ROW_MAX_BYTES);
    const largest = DESIRED_PAGE_RPC_BUDGET_BYTES - frame - (64 << 10);
    const big = { SEND_QUEUE_BYTES: String(256 << 20) };
    const cfg = hubConfig({ ...big, DESIRED_PAGE_BYTES: String(largest) });
    expect(cfg.DESIRED_PAGE_BYTES).toBe(largest);
    expect(() => hubConfig({ ...big, DESIRED_PAGE_BYTES: String(largest + 1) })).toThrow(/DESIRED_PAGE_BYTES: must be at most/);
    // A smaller largest frame leaves room for a larger page.
    expect(hubConfig({ ...big, MAX_FRAME_BYTES: String(1 << 16), DESIRED_PAGE_BYTES: String(largest + 1) }).DESIRED_PAGE_BYTES).toBe(largest + 1);
    // CLAIM_SNAPSHOT_BYTES needs no bound of its own: the claim's page is held to a desired page's.
    const claim = hubConfig({ ...big, DESIRED_PAGE_BYTES: String(largest), CLAIM_SNAPSHOT_BYTES: String(1 << 30) });
    expect(claimPageBytes(claim)).toBe(largest);
  });

  it('HISTORY_RETENTION_MS longer than a century is refused, not accepted until every retention pass fails (22008: a horizon before 4713 BC)', () => {
    for (const v of ['1e15', '9007199254740991', String(HISTORY_RETENTION_MAX_MS + 1)]) {
      expect(() => hubConfig({ ...BASE, HISTORY_RETENTION_MS: v }), v).toThrow(/HISTORY_RETENTION_MS/);
    }
    expect(hubConfig({ ...BASE, HISTORY_RETENTION_MS: String(HISTORY_RETENTION_MAX_MS) }).HISTORY_RETENTION_MS).toBe(HISTORY_RETENTION_MAX_MS);
  });

  it('OPERATIONS_RETENTION_MS is 90 days unless set, and refused past a century as HISTORY_RETENTION_MS is', () => {
    expect(hubConfig(BASE).OPERATIONS_RETENTION_MS).toBe(90 * 24 * 3_600_000);
    for (const v of ['0', '-1', '1.5', String(HISTORY_RETENTION_MAX_MS + 1)]) {
      expect(() => hubConfig({ ...BASE, OPERATIONS_RETENTION_MS: v }), v).toThrow(/OPERATIONS_RETENTION_MS/);
    }
    expect(hubConfig({ ...BASE, OPERATIONS_RETENTION_MS: String(HISTORY_RETENTION_MAX_MS) }).OPERATIONS_RETENTION_MS).toBe(HISTORY_RETENTION_MAX_MS);
  });

  // Found by a review: these reach Postgres as "now() minus them" too (the cluster list's and the
  // fleet's "connected", the contention episode, the claim's count of recent displacements); past
  // 4713 BC every such statement failed (22008), answered 400 as the request's data.
  it('the contention window and quiet period, and the "connected" horizon (3 × LIVE_SWEEP_MS + 2 × POLL_INTERVAL_MS), are refused past a century', () => {
    for (const name of ['CONTENTION_WINDOW_MS', 'CONTENTION_QUIET_MS'] as const) {
      expect(() => hubConfig({ ...BASE, [name]: String(HISTORY_RETENTION_MAX_MS + 1) }), name).toThrow(new RegExp(name));
      expect(hubConfig({ ...BASE, [name]: String(HISTORY_RETENTION_MAX_MS) })[name]).toBe(HISTORY_RETENTION_MAX_MS);
    }
    expect(() => hubConfig({ ...BASE, LIVE_SWEEP_MS: '80000000000000' })).toThrow(/LIVE_SWEEP_MS: makes the "connected" horizon/);
    expect(() => hubConfig({ ...BASE, POLL_INTERVAL_MS: String(HISTORY_RETENTION_MAX_MS) })).toThrow(/POLL_INTERVAL_MS: makes the "connected" horizon/);
    const sweep = Math.floor((HISTORY_RETENTION_MAX_MS - 2 * 5_000) / 3);
    const cfg = hubConfig({ ...BASE, LIVE_SWEEP_MS: String(sweep) });
    expect(connectedStaleAfterMs(cfg)).toBeLessThanOrEqual(HISTORY_RETENTION_MAX_MS);
  });

  it('PG_QUERY_TIMEOUT_MS and CONTENTION_THRESHOLD are accepted up to what a Postgres integer holds, refused beyond (test/hub/config-postgres-ranges.test.ts)', () => {
    // Beyond it, every connection (statement_timeout, 22023) or every claim (22003) failed.
    for (const name of ['PG_QUERY_TIMEOUT_MS', 'CONTENTION_THRESHOLD'] as const) {
      expect(hubConfig({ ...BASE, [name]: String(PG_INT_MAX) })[name], name).toBe(PG_INT_MAX);
      for (const v of [String(PG_INT_MAX + 1), '1e15']) {
        expect(() => hubConfig({ ...BASE, [name]: v }), `${name}=${v}`).toThrow(new RegExp(`${name}: must be at most ${PG_INT_MAX}`));
      }
    }
  });

  it('case variants and padding of HUB_JURISDICTION, HUB_REGION and DB_GATEWAY_LOCATION_HINT are refused by name', () => {
    for (const j of ['EU', 'Eu', ' eu', 'eu ', 'FedRAMP', 'fedramp_high']) {
      expect(() => regionCfg({ HUB_REGION: 'eu', HUB_JURISDICTION: j }), j).toThrow(/invalid hub configuration HUB_JURISDICTION/);
    }
    for (const r of ['EU', ' eu', 'eu-', '-eu', 'e'.repeat(33)]) {
      expect(() => regionCfg({ HUB_REGION: r }), r).toThrow(/invalid hub configuration HUB_REGION/);
    }
    for (const h of ['WEUR', 'weur ', 'eu']) {
      expect(() => regionCfg({ HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', DB_GATEWAY_LOCATION_HINT: h }), h).toThrow(/invalid hub configuration DB_GATEWAY_LOCATION_HINT/);
    }
  });

  it('a jurisdiction with an empty HUB_REGION is refused: the region must be named', () => {
    expect(() => regionCfg({ HUB_REGION: '', HUB_JURISDICTION: 'eu' })).toThrow(/HUB_JURISDICTION: needs HUB_REGION/);
  });
});
