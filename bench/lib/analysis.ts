/**
 * The "what limits it" part of RESULTS.md, written from this run's own numbers and from the CPU
 * profiles of the hub isolate in bench/PROFILE.json (`npm run bench -- --profile`). Each
 * paragraph states the mechanism (with the code that causes it), the figures from this run that
 * show it, what the profile shows, and what would move the figure.
 */
import { fmtMs, fmtNum, pct } from './format';
import type { ProfileSummary } from './profiler';
import type { ScenarioResult } from './types';

/** CPU profiles of the hub isolate by scenario, from `--profile` runs (bench/PROFILE.json). */
export interface ProfileRun {
  profiles: Record<string, ProfileSummary & { scope: string; command: string; source: string; started: string; data?: Record<string, number> }>;
}

type Data = Record<string, number>;

function d(results: ScenarioResult[], name: string): Data | null {
  return results.find((r) => r.name === name && !r.error)?.data ?? null;
}

const n = (v: number | undefined, digits?: number) => fmtNum(v ?? Number.NaN, digits);
const ms = (v: number | undefined) => fmtMs(v ?? Number.NaN);
const metText = (ok: boolean) => (ok ? 'target met' : 'target missed');

/** What a kernel profile of workerd over the handshake scenario showed (2026-12-03; checks in bench/before.json). */
const INODE_SCAN =
  '. Most of that is the kernel\'s: a profile of the workerd process over this scenario (`perf record -g -p <pid>`, 2026-12-03, 6,899 samples) has 61% of its samples in the kernel, 33% creating files in ext4\'s inode allocator (`__ext4_new_inode` → `find_inode_bit` → `recently_deleted`) and 15% in fsync. ' +
  "This machine's disk is ext4 without a journal, which does not reuse an inode freed within the last minute (six while the inode's table block is dirty) and reads the free ones one by one to find an older one; every new object creates four files and deletes one of them at once (its database, the rollback journal SQLite drops when the database switches to WAL, the WAL and its index), so each creation walks past the journals of every object created in the last minutes: more work per object the larger the storm (and a run started within minutes of another may also walk past the thousands of files the other's cleanup deleted). " +
  'On a fresh ext4 with a journal (a loop device, `TMPDIR=<its mount> npm run bench -- --only handshake`) workerd spent 4.8–5.9 ms of CPU per handshake against 8–11 ms on the disk that hour, but its syncs cost more and the storm took as long (8.5–10.6 s)';

/** "`exec` (native) 35%, GC 11%, …": the top self-time functions of a profile. */
function topFunctions(p: ProfileSummary, k = 6): string {
  return p.topFunctions
    .slice(0, k)
    .map((f) => {
      const [name = '', file = ''] = f.name.split(' ');
      // An anonymous function is only told apart by where it is (the bundle's line).
      const where = file === '(native)' ? ' (native)' : name === '(anonymous)' && file ? ` (${file})` : file && !file.startsWith('index.js') ? ` (${file.replace(/:\d+$/, '')})` : '';
      const label = name === '(garbage' ? 'GC' : `\`${name}\`${where}`;
      return `${label} ${pct(f.share)}`;
    })
    .join(', ');
}

/** What a scenario's profile shows, with where it came from; '' when there is none. */
function profileOf(profiles: ProfileRun | undefined, name: string, k = 6): string {
  const p = profiles?.profiles[name];
  if (!p) return '';
  const commit = /commit ([0-9a-f]{7,12})/.exec(p.source)?.[1] ?? p.source;
  return `CPU profile of the hub isolate over ${p.scope} (bench/PROFILE.md, hub ${commit}; shares of the time on the isolate's thread): ${topFunctions(p, k)}`;
}

/** The ingest paragraph's account of the runtime's floor (a figure of runs since 2026-12-03). */
function floorText(ing: Record<string, number | undefined>): string {
  const hubUs = ing.workerdUsPerFrame ?? Number.NaN;
  const floorUs = ing.floorUsPerFrame ?? Number.NaN;
  return (
    `*What limits it:* most of workerd's CPU per frame is the runtime's. A Durable Object that takes its socket as the session object does (\`ctx.acceptWebSocket\`, so every message is an event of its own), parses each frame and acks every 500th (the runtime floor, measured beside the hub in this run) costs workerd ${n(floorUs)} µs per frame and takes ${n(ing.floorFps, 0)} frames/s; ` +
    `the hub's own work per frame (validation, ordering, the batch and its parameters, the statement's answer, the ack and the cursor's commit) is the rest of its ${n(hubUs)} µs, ≈ ${n(Math.max(0, hubUs - floorUs))} µs, and Postgres adds ${n(ing.postgresUsPerFrame)} µs, on the same two cores as the load generator. ` +
    `Locally, a message to a hibernatable object costs more than one to a socket taken with \`accept()\` or to Node's ws (\`npx tsx bench/micro/ws-delivery.ts\`, bench/MICRO.md: about 5.5–5.7 µs against 3.5–3.8 µs of CPU per message, before any parse), and a send from an object more again, so the hub acks once per committed batch; issue 12's idle fleet needs the hibernatable socket. ` +
    `The Node echo that sets the target parses and acks every frame, storing nothing, for ${n(ing.echoUsPerFrame)} µs of its process's CPU.`
  );
}

export function renderAnalysis(results: ScenarioResult[], facts: Record<string, number>, source: string, profiles?: ProfileRun): string[] {
  const out: string[] = [];
  const p = (s: string) => out.push(s, '');
  const hs = d(results, 'handshake');
  const ing = d(results, 'ingest');
  const des = d(results, 'desired');
  const res = d(results, 'resume');
  const rsy = d(results, 'resync');
  const fl = d(results, 'fleet');
  const prof = (name: string, k?: number) => profileOf(profiles, name, k);

  out.push('## What limits each figure now', '');
  p(
    `Every figure below comes from this run; the mechanisms are those of the source measured (${source}). In it, token lookups, claims, the fleet poll, admin statements and desired-state reads run on warm connections held by a few gateway objects (\`src/hub/db/gateway.ts\`: \`DB_GATEWAY_SHARDS\` = 4, each with up to \`DB_GATEWAY_CONNECTIONS\` = 3); a session opens a connection of its own only to ingest. An admin write of desired state is committed by a gateway shard, which pokes the owning session with the change in the same turn. Idle sessions sleep: no periodic alarm, a fleet poll per shard instead of one per session, and the runtime answers an idle operator's canonical ping. Profiles are from a separate \`--profile\` run (the profiler slows the hub, so its figures are not results); shares are of the time the profiler could attribute.`,
  );

  if (des) {
    const floorGap = des.hubFloorMs! - des.sioFloorMs!;
    p(
      `**Desired, single change** (${metText(des.hubMs! <= des.sioDbMs!)}: ${ms(des.hubMs)} from PUT to frame against ${ms(des.sioDbMs)} for Socket.IO + Postgres doing the same write, ${ms(des.sioMs)} for Socket.IO alone). ` +
        `Since 2026-12-04 the baseline sends each statement at once: the Neon driver gathers a statement's messages and sends them from \`setTimeout(0)\`, which Node rounds up to 1 ms, so every change of Socket.IO + Postgres in earlier runs waited about a millisecond for nothing (bench/MICRO.md, "The Neon driver from Node"; workerd runs a zero timer at once, so the hub keeps the driver's default). The ratios before that date are against the slower baseline. ` +
        `The path: the Worker takes the request and calls the cluster's gateway shard (an RPC to another object), the shard runs the one statement on a warm connection and, in the same turn as the commit, pokes the owning session object with the change (a second RPC), which stamps it into its replay buffer (SQLite) and sends it; the shard answers the Worker after a zero timer, so that on the one isolate thread the session's stamping and sending run before the Worker's response (the admin answer, ${ms(des.putMs)} to the client; about a tenth off this figure, the checks below). Socket.IO + Postgres does one statement and an emit in one process. ` +
        `${facts.directSocket ? `Part of it is the runtime's request entry, even with clients on the Worker's direct socket (no Miniflare entry worker; workerd's HTTP${facts.assetsRouter ? ' and the assets router in front of the Worker' : ''}, as in a deployment)` : "Part of it is the runtime's request entry"}: a GET the Worker answers 404 without work takes ${ms(des.hubFloorMs)} against ${ms(des.sioFloorMs)} for Node's http server (${ms(floorGap)} more); after that floor the hub's own path is ${ms(des.hubMs! - des.hubFloorMs!)} against ${ms(des.sioDbMs! - des.sioFloorMs!)} for Socket.IO + Postgres. workerd spends ${ms(des.cpuPerSingleMs)} of CPU per change (Worker, gateway and session together, the operator's acks included). ${prof('desired') ? `${prof('desired')}. ` : ''}` +
        `The hops themselves cost little: in workerd alone (\`npx tsx bench/micro/workerd-hops.ts\`, bench/MICRO.md) the request entry, the two RPCs and a frame with its SQLite row come to about 0.46 ms, and a committed upsert from an object through the driver 0.2–0.4 ms. The rest is the hub's own work per change on the one isolate thread: the admin API's parsing and validation, the gateway's coalescer and driver, the owner lookup in the statement (0.55 ms from Node for the hub's statement against 0.39 ms for a bare revision bump), and the session's stamping (the frame's row, its record of which deployment the frame carried and the session's meta, in one commit) before the output gate lets the frame go. ` +
        `*What would move it:* less work per change in each of those, since no one of them dominates; the structure stays: the object that holds the operator's socket could only run the statement on a connection of its own (an idle fleet holds none, issue 12; opening one costs ~20 ms), and a Worker cannot keep one between requests, so the write goes Worker → gateway (warm connection) → session; and the session stores the frame before it leaves, so that a frame the operator has seen is never lost or renumbered by a restart.`,
    );
    const perChangeMs = (des.burstCpuS! * 1000) / des.burstN!;
    p(
      `**Desired, burst of ${n(des.burstN, 0)} single PUTs** (${metText(des.hubBurstMs! <= des.sioDbBurstMs!)}: ${ms(des.hubBurstMs)} until the operator has all of them, against ${ms(des.sioDbBurstMs)} for Socket.IO + Postgres and ${ms(des.sioBurstMs)} for Socket.IO alone; ${n(des.concurrency, 0)} PUTs in flight). ` +
        `Postgres is not what limits it: sampled during the hub's burst, the bench database had on average ${n(des.burstHubActiveAvg)} active backends, ${n(des.burstHubLockAvg)} of them waiting on a lock (every PUT bumps \`clusters.desired_revision\` of the one cluster; the gateway shard that takes all of a cluster's writes commits the PUTs that arrive while one is being written together, one statement and one commit, \`src/hub/db/desired-coalesce.ts\`, so they no longer queue on that row) and most of the rest on WAL sync; it was idle most of the time. workerd is what is busy: ${n(des.burstCpuS)} s of CPU over the ${n(des.hubBurstMs! / 1000)} s burst (${n(des.burstCpuS! / (des.hubBurstMs! / 1000))} cores), ${ms(perChangeMs)} per change for the Worker's request, the gateway's RPC and statement, the poke and the session's stamping and sending — locally all in one workerd process. Socket.IO + Postgres sends its statements one after the other on one connection and pays a round trip and a commit per change (${ms(des.sioDbBurstMs! / des.burstN!)}). ` +
        `${prof('desired') ? `The profile spreads that CPU thinly (no function above ~12%: ${topFunctions(profiles!.profiles.desired!, 4)}), so it is the number of hops and turns per change, not one hot spot. ` : ''}` +
        `*What would move it:* fewer turns per change: the Worker's request entry (the single change's paragraph) and the Worker → gateway → session hops are paid per PUT even when their statements are coalesced; a client that has its changes at hand saves all of them with the bulk endpoint (next).`,
    );
    p(
      `**Desired, ${n(des.burstN, 0)} changes in one bulk request** (${metText(des.hubBulkMs! <= 150)}: ${ms(des.hubBulkMs)}, target 150 ms; Socket.IO + Postgres running the same statement and 1,000 emits: ${ms(des.sioDbBulkMs)}, Socket.IO alone ${ms(des.sioBulkMs)}). One statement and one commit; the response arrives after ${ms(des.bulkResponseMs)}, the first frame after ${ms(des.bulkFirstMs)}: the gateway pokes the owner with all ${n(des.burstN, 0)} changes in one RPC, and the session stamps them into its replay buffer and sends them as one batch.`,
    );
  }

  if (ing) {
    p(
      `**Ingest, one session** (${metText(ing.hubFps! >= 60_000 && ing.fraction! >= 0.65)}: ${n(ing.hubFps, 0)} frames/s = ${pct(ing.fraction!)} of the ws echo ceiling ${n(ing.echoFps, 0)} frames/s; target 60,000 and 65%). ` +
        `${ing.batchMedian! >= 1_999 ? `Every batch is full (median ${n(ing.batchMedian, 0)} frames = \`INGEST_BATCH_FRAMES\`), so frames wait for the statement before them. ` : `Batches are not full (median ${n(ing.batchMedian, 0)} frames): the isolate, not the statement, sets the pace. `}` +
        `${facts.pipelinedIngest ? `Two statements are in flight in the steady state: the next is queued behind the one running, on the same connection, and the driver (which does not pipeline) sends it as soon as the first's answer arrives, so Postgres waits one hop rather than for the session to settle one and build the next (\`IngestSchedule.behind\`: never across a resync boundary or a held subject, never a subject the first carries). ${facts.slidingIngest ? "When the first commits, the one behind takes its place and another is built behind it, after the turn that sent the ack has ended: the ack leaves only once that turn's write of the cursor is committed, and building the next 2,000 frames' statement in the same turn held it, and with it the operator's next frames (\`IngestPipeline\`; before, the pair was settled together and the next pair built in the turn of the second's ack). What sets the pace is then the isolate: a statement's answer is seen only after the operator's frames that arrived before it, so one cycle is the ack, the operator's next frames through the isolate, and the next statement's build. " : 'The pair is settled together and the next pair built in the turn that sends the second ack, which holds that ack (the ack leaves behind the turn’s commit of the cursor) and with it the operator’s next frames. '}` : ''}` +
        `The batch statement for ${n(ing.batchMedian, 0)} rows takes ${ms(ing.namedMs)} prepared (${ms(ing.stmtMs)} unnamed, ${ms(ing.hubPsqlMs)} from psql straight; the minimal set-based upsert of the same rows ${ms(ing.minimalMs)}), and waiting on it is ≈ ${pct(ing.dbShare!)} of the wall time. ` +
        `workerd spends ${n(ing.workerdUsPerFrame)} µs of CPU per frame (${n(ing.workerdCores)} cores at this rate; alone it would top out near ${n(1e6 / Math.max(1, ing.workerdUsPerFrame!), 0)} frames/s) and Postgres ${n(ing.postgresUsPerFrame)} µs; with the load generator and the proxy they share two cores. ` +
        `${facts.fastValidators ? 'The hot operator types are checked by hand-written validators proven equal to their zod schemas (src/protocol/fast-payloads.ts), and the batch travels as positional rows. ' : 'Frames are still validated by zod 4 on its interpreted path (Workers allow no `eval`), and each batch table is built with a `JSON.stringify`. '}` +
        `${facts.leanIngest ? "A batch of observed rows only is written by a lean statement that carries just those tables' writes (`ingestStatement`): the full statement's seventeen other writes, each reading `[]`, cost Postgres 0.55–1.1 ms of CPU per statement, planned and started with the rest (bench/MICRO.md: 0.91× the full statement's backend CPU at 2,000 rows, 0.65× at 100). " : ''}` +
        `${prof('ingest') ? `${prof('ingest', 8)}. ` : ''}` +
        `${ing.floorUsPerFrame !== undefined && Number.isFinite(ing.floorUsPerFrame) ? floorText(ing) : ''}`,
    );
    const share = ing.multiFps! / ing.multiEchoFps!;
    p(
      `**Ingest, ${n(ing.sessions, 0)} sessions** (${metText(share >= 0.55)}: ${n(ing.multiFps, 0)} frames/s in total = ${pct(share)} of the echo's ${n(ing.multiEchoFps, 0)}; target 55%). ` +
        `The statements run concurrently on ${n(ing.sessions, 0)} session connections; workerd used ${n(ing.multiWorkerdCores)} cores and Postgres ${n(ing.multiPostgresCores)} of the machine's 2, beside the proxy and the load generator, and the ack p99 was ${ms(ing.multiP99)}: the machine is full, so what moves this figure is CPU per frame on both sides (the one-session paragraph), not concurrency.${facts.leanIngest ? " Each session's batches are a few hundred frames here (its window is 800), where the lean statement saves the most Postgres CPU per frame (0.79× the full statement's at 400 rows)." : ''} Much of this figure's rise since the before is the measuring's, and the figure is sensitive to the sender: since 2026-12-03 the sender makes every session's rows exist before the measured run (the one-second pass had left 42% of them to be inserted during it) and sizes its arrays to its window (a run held 32 MiB per session before; with those arrays, in same-hour pairs, the hub's and the echo's figures were both higher and the share 56–61% against 59–68%); the before hub measured this way is in the checks below.`,
    );
  }

  if (hs) {
    const kernelShare = hs.kernelPerConnectMs !== undefined && hs.cpuPerConnectMs ? pct(hs.kernelPerConnectMs / hs.cpuPerConnectMs) : '';
    p(
      `**Handshake** (${metText(hs.hubMedianMs! <= 10)}: median ${ms(hs.hubMedianMs)}, target 10 ms; the bare ws server answers a hello in ${ms(hs.echoMs)}, Socket.IO connects in ${ms(hs.sioMs)}). ` +
        `The upgrade takes ${ms(hs.upgradeMs)}: the Worker hashes the token, looks it up through a gateway shard (an RPC and a query on a warm connection: ${ms(hs.pgQueryMs)} from Node) and routes to a new session object, whose creation locally includes its SQLite database file${facts.quietUpgrade ? ' (the upgrade itself writes nothing there: no tables, no alarm; the handshake deadline is an in-memory timer until the hello)' : ''}; hello → welcome takes ${ms(hs.helloToWelcomeMs)}: the new object claims ownership through a gateway shard (another RPC and statement), joins the fleet poll, and answers${facts.quietUpgrade ? ' after one commit that creates the tables, records the session, sets the alarm and writes the wake counts' : ''}${facts.claimSnapshot ? `; the gateway reads the first page of the fresh session's resync snapshot right behind the claim and returns both in one call (\`src/hub/db/claim-snapshot.ts\`), so the hub's resync (begin, the page, stream.end; here empty) is numbered and stored in the welcome's commit and leaves right behind it, ending ${ms(hs.resyncAfterWelcomeMs)} after the welcome, with no page read or operations check of its own` : ''}. workerd spends ${n(hs.cpuPerConnectMs)} ms of CPU per fresh handshake${kernelShare ? `, ${kernelShare} of it in the kernel (system time)` : ''}. ${prof('handshake') ? `${prof('handshake')}.` : ''} ` +
        `*What would move it:* the new object. \`fetch\` (native) in the profile is the Worker's call into a session object that does not exist yet: its creation (locally, a SQLite database file) runs on the isolate's one thread. ${facts.quietUpgrade ? `Locally that is mostly storage: before the welcome the isolate's thread waits on disk syncs (the object's new files, its first WAL write, ${facts.directSocket ? '' : "Miniflare's record of its name, "}the hello's commit and the alarm scheduler's${facts.directSocket ? "; Miniflare's record of the object's name, a write at every construction, is gone with its local explorer off in this run" : ''}), none of them avoidable by the hub any more${kernelShare ? INODE_SCAN : ''}; with workerd's object storage on tmpfs instead of this disk, the hub of 2026-12-03's full run welcomes in 5.82 ms and a storm of 1,000 takes 2.34–2.80 s, with 3.86 ms of workerd CPU per handshake of which 0.863 ms in the kernel (earlier hubs: 6.8–8.6 ms and 3.1–3.8 s; checks below, \`TMPDIR=/dev/shm npm run bench -- --only handshake\`), both inside the targets. ` : ''}The claim cannot travel with the routing: the spec establishes ownership by a claim at hello, and a claim made at the upgrade would let a connection that never sends a valid hello (a wrong cluster_id, another major) displace the cluster's live session; and the Worker's token lookup must come before the object exists, since the object is addressed by the token's cluster and placed by that cluster's location hint.`,
    );
    const stormOk = Number.isFinite(hs.stormS) && hs.stormS! <= 6;
    p(
      `**Storm** (${metText(stormOk)}: ${Number.isFinite(hs.stormS) ? `${n(hs.stormSize, 0)} operators welcomed in ${n(hs.stormS)} s` : `not all ${n(hs.stormSize, 0)} operators welcomed within ${n(hs.stormDeadlineS, 0)} s (fewest: ${n(hs.stormWelcomedMin, 0)})`}, target 6 s). ` +
        `workerd used ${n(hs.stormCpuS)} s of CPU${Number.isFinite(hs.stormKernelS) ? ` (${n(hs.stormKernelS)} s of it in the kernel)` : ''} over ${n(hs.stormWallS)} s: locally one isolate thread runs the Worker, the creation of every new object and the gateway shards, at about ${n(hs.cpuPerConnectMs)} ms of CPU per fresh handshake, so ${n(hs.stormSize, 0)} handshakes need that thread for most of the storm (a deployment spreads objects over machines)${facts.quietUpgrade ? ", and it also waits on each new object's disk syncs (the handshake paragraph)" : ''}; Postgres peaked at ${n(hs.stormPgPeak, 0)} connections, and refusals were ${n(hs.stormFailures, 0)} (1013: ${n(hs.storm1013 ?? 0, 0)}, 4408: ${n(hs.storm4408 ?? 0, 0)}, HTTP 503: ${n(hs.stormHttp503 ?? 0, 0)}).` +
        (Number.isFinite(hs.stormS)
          ? ''
          : ' A repetition that did not finish: its refusals are counted above. Before this hub, a statement late in a gateway connection\'s queue discarded the connection, failing everything queued on it (token lookups answered HTTP 503, claims 1013) and reconnecting under the load, and every operator\'s retries added to it; now a late statement fails alone and leaves the queue, and a connection is discarded only when it answered nothing for a whole deadline (test/workers/gateway-congestion.test.ts).'),
    );
  }

  if (res) {
    p(
      `**Resume** (${metText(res.totalMs! <= 200 && res.downOnlyMs! <= res.sioMs!)}: ${ms(res.totalMs)} for ${n(res.n, 0)} frames each way, target 200 ms; hub → operator alone ${ms(res.downOnlyMs)} against Socket.IO's recovery ${ms(res.sioMs)}). The welcome takes ${ms(res.welcomeMs)}: ${res.upgradeMs !== undefined ? `the upgrade ${ms(res.upgradeMs)} (the Worker's token lookup, an RPC to a gateway shard and a statement, then the session's object, which already exists), then hello → welcome ${ms(res.welcomeMs! - res.upgradeMs)} (the claim, another RPC and statement, and the list of frames to re-send read from SQLite)` : "the Worker's token lookup and the claim, each an RPC to a gateway shard and a statement"}; the replay from the object's SQLite follows ${ms(res.downMs! - res.welcomeMs!)} later, and the operator's frames are applied and acked at ${ms(res.upMs)} — their first statement opens the session's own ingest connection.`,
    );
  }
  if (rsy) {
    p(
      `**Full resync** (${metText(rsy.totalMs! <= 3_000)}: ${ms(rsy.totalMs)} end to end, target 3 s; Postgres alone runs the same statements in ${ms(rsy.pgAloneMs)}). The ${n(rsy.deployments, 0)} deployments reach the operator after ${ms(rsy.downMs)}, the operator's ${n(rsy.upFrames, 0)} frames are applied and pruned after ${ms(rsy.upMs)}; workerd spends ${n(rsy.workerdCpuS)} s of CPU (${n((rsy.workerdCpuS! * 1e6) / (rsy.upFrames! + rsy.deployments!))} µs per frame either way) and its RSS peaks ${n(rsy.peakRssMiB! - rsy.rssBeforeMiB!)} MiB above where it started. Beside the old hub on the same day (the checks under \`Every other figure against its before\`) a resync cost the same workerd CPU (0.720 s against 0.710 s); per frame the isolate's time goes to SQLite (the replay buffer and the operator's cursor), decoding and encoding frames, and garbage collection (the resync profile in bench/PROFILE.md), no one function.`,
    );
  }

  if (fl) renderFleet(fl, p, prof('fleet', 8), profiles?.profiles.fleet?.data, profiles?.profiles.fleet?.source);
  return out;
}

function renderFleet(fl: Data, p: (s: string) => void, profile: string, profiled: Data | undefined, profileSource = ''): void {
  // A bundle line is only meaningful for the commit whose bundle was read (wrangler deploy --dry-run).
  const sweepLine = profileSource.includes('32b333319467') ? '`(anonymous)` at index.js:31596 is the gateway\'s fleet poll poking the sessions it found due (`DbGateway.alarm`, here the sweep)' : '';
  // JS heap readings need the inspector: this run's if it had one, else the profile run's.
  const heap = Number.isFinite(fl.heapOpenMiB) ? fl : profiled && Number.isFinite(profiled.heapOpenMiB) ? profiled : null;
  const perMinPerSession = (k: string) => fl[`kind_${k}`] ?? 0;
  const xactsOther = fl.xactsPerS! - fl.xactsMedian5s!;
  p(
    `**Idle fleet: wakes** (${metText(fl.wakesPerMin! <= 3)}: ${n(fl.wakesPerMin)} per session per minute, target 3; issue 12 counted about 18 before). ` +
      `Nothing periodic wakes a session any more but its clock's silence deadline: the alarm is armed for 30 s after the last sign of life, and when it fires it finds a recent runtime-answered ping (\`getWebSocketAutoResponseTimestamp\`) and re-arms for 30 s after that ping — so it fires every 20–30 s (${n(perMinPerSession('alarm'))} alarms per session per minute here). The fleet poll adds its sweep: a session not checked for \`LIVE_SWEEP_MS\` (5 min) is poked and runs its check (${n(perMinPerSession('check'))} per minute). No ping woke an object: ${n(fl.pings, 0)} pings in the window, ${n(perMinPerSession('message'))} \`message\` wakes per session per minute. The silence rule itself is the floor: a hub that must cut a silent operator within 30 s has to look at least every 30 s, i.e. 2 wakes a minute, unless the runtime did the looking.`,
  );
  p(
    `**Idle fleet: out of memory** (${metText(fl.outOfMemoryMin! >= 0.5)}: lowest share at any sampled instant ${pct(fl.outOfMemoryMin!)}, mean ${pct(fl.outOfMemoryMean!)}; target 50% at any instant). ` +
      `This workerd evicts an object ${n(fl.evictionDelayS)} s after its last event (measured on the fresh hub: still resident after ${n(fl.evictionResidentS)} s, gone after ${n(fl.evictionEvictedS)} s), so each wake keeps an object in memory about ${n(fl.evictionDelayS, 0)} s and costs a construction (${n(fl.constructionsPerMin)} per session per minute; the model predicted ${n(fl.modelConstructions, 0)} constructions, the objects counted ${n(fl.measuredConstructions, 0)}). With a wake every 20–30 s that is a third to a half of the time in memory, so on average two thirds of the objects are out (above the 50% the target asks for at every instant). ` +
      `${fl.belowInstants ? `The minimum is not: the share fell below 50% at ${n(fl.belowInstants, 0)} of ${n(fl.instants, 0)} sampled instants. ` : ''}` +
      `${Number.isFinite(fl.outOfMemoryMinSweep) ? `The lowest share while the first sweeps could fall due (${n(fl.sweepFromS, 0)}–${n(fl.sweepToS, 0)} s after the fleet opened) was ${pct(fl.outOfMemoryMinSweep!)}` : `No sweep could fall due in this window (${n(fl.sweepFromS, 0)}–${n(fl.sweepToS, 0)} s after the fleet opened)`}: the sweep is spread, each session's coming due between one and two sweep periods after its last check-in at an offset set by its id, so a fleet claimed together is not swept together. ` +
      `At other times the lowest share was ${pct(fl.outOfMemoryMinOutside!)}${fl.belowOutsideSweep ? ` (below 50% at ${n(fl.belowOutsideSweep, 0)} instants)` : ''}. An idle session wakes only at its silence deadline, which each wake re-arms for 30 s after the last ping the runtime answered; the ping due at that very moment is already in (an alarm runs a few ms late), so the deadline moves a whole 30 s and a session keeps the phase it opened with. A fleet opened together (this one within ${n(fl.connectS)} s; a hub restart, a reconnect storm) would so wake in crests every 30 s for as long as it lives: \`test/unit/session/wake-phases.test.ts\` models it from the session clock, and a fleet opened within 16 s is never less than 39% out of memory there (a full run of the hub before the change measured 36%). The hub gives every session one extra check 30–50 s after it opens, between its first two silence checks (\`phaseCheckOffset\`, by its id): it takes the next deadline from whichever ping came last by then, which spreads the phases, at one wake per opened session (the same model: 57% at every instant). The section below lists the lowest share in each 20 s.` +
      `${fl.outOfMemoryMin! >= 0.5 ? '' : ' *What would move it:* a spread of phases the extra check has not reached yet (it acts once per session, 30–50 s after it opens), or a shorter eviction delay: the runtime keeps an object about 10 s after each wake, against a wake every 30 s.'}`,
  );
  p(
    `**Idle fleet: memory** (${metText(fl.perSessionKiB! <= 200)}: ${n(fl.perSessionKiB, 0)} KiB of workerd RSS per idle session, target 200 KiB; ${n(fl.allResidentKiB, 0)} KiB per session just after opening, when all objects were resident; a Node ws connection costs ${n(fl.echoKiB)} KiB, a Socket.IO one ${n(fl.sioKiB)} KiB). ` +
      `Evicting objects does not give their memory back: workerd's anonymous memory grew from ${n(fl.anonBeforeMiB)} to ${n(fl.anonOpenMiB)} MiB while the fleet opened (all resident) and was ${n(fl.anonEndMiB)} MiB at the window's end, with ${pct(fl.outOfMemoryMean!)} of the objects out of memory on average. ` +
      `${heap ? `It is not the JavaScript heap: the isolate's heap held ${n(heap.heapBeforeMiB)} MiB before the fleet, ${n(heap.heapOpenMiB)} MiB with all of it resident and ${n(heap.heapEndGcMiB)} MiB after a forced GC at the end${heap === fl ? '' : ' (the `--profile` run of this scenario, bench/PROFILE.md)'}. ` : ''}` +
      'workerd allocates with tcmalloc (statically linked; its symbols are in the binary), which keeps freed pages for reuse rather than returning them, so the RSS of an idle fleet is set by its peak of resident objects — here the opening, when every object was in memory at once — and by the churn of a construction per wake, not by how many objects are resident now. The figure measures the runtime\'s allocator as much as the hub: fewer wakes (and no all-at-once sweep) lower the peak; only a runtime that returns memory would take the RSS down with the evictions.',
  );
  p(
    `**Idle fleet: CPU** (${metText(fl.cpuCores! <= 0.05)}: ${n(fl.cpuCores)} cores of workerd for ${n(fl.established, 0)} idle sessions, target 0.05; the ws echo server spends ${n(fl.echoCores)} cores on the same pings, Socket.IO ${n(fl.sioCores)} on its heartbeats). ` +
      `That is ${n((fl.cpuCores! * 60_000) / Math.max(1, fl.wakesPerMin! * fl.established!))} ms of CPU per wake, and nearly every wake is a construction (${n(fl.constructionsPerMin)} constructions for ${n(fl.wakesPerMin)} wakes per session per minute): ${profile ? `${profile}.` : 'the constructor loads the session from SQLite and re-arms the alarm.'} ` +
      `${profile ? `In that profile a wake is mostly the construction: reading and parsing the session record (\`loadMeta\`), the wake counter's read (\`load\`) and its write, which joins the alarm's commit (\`flushPending\`; a second later, on its own, before the hub of 2026-12-02), the catalogue read that stands in for the schema (\`SessionSql\`, formerly \`ensureSchema\`), the constructor's parts (\`SessionObject\`) and re-arming the alarm (\`setAlarm\`), most of it SQLite (\`exec\`)${sweepLine ? `; ${sweepLine}` : ''}. ` : ''}` +
      'The runtime answering 100 pings a second costs little beside it. *What would move it:* fewer wakes, but the silence rule is their floor (the wakes paragraph); what is left is the runtime\'s own cost of bringing an object back into memory, which local workerd pays in full at every wake.',
  );
  p(
    `**Idle fleet: Postgres** (${metText(fl.xactsPerS! <= 2)}: ${n(fl.xactsPerS)} transactions/s for ${n(fl.established, 0)} idle sessions, target 2; before, 194). The fleet poll is ${n(fl.xactsMedian5s)} transactions/s (the median 5 s interval: 4 shards, one statement each per 5 s), whatever the number of sessions. The sweep adds no statement of its own: a session that has not checked in for a sweep period (each at an offset of its own between one and two periods) is poked, a live one answers that it is alive, and the poller records every answer in its next statement; the ≈ ${n(Math.max(0, xactsOther))} transactions/s above the poll's are the checks of sessions that something did change for (highest 5 s interval ${n(fl.xactsPeak5s)} per second). What remains is the poll itself: one statement per shard per interval, whatever the fleet's size.`,
  );
}
