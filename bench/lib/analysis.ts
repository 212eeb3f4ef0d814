/**
 * The "what limits it" part of RESULTS.md, written from this run's own numbers. Each paragraph
 * states the mechanism (with the code that causes it), the figures from this run that show it,
 * and the change that would remove it. Mechanisms were found with the counters below and a CPU
 * profile of the hub isolate (`npm run bench -- --profile`); see the proposals for evidence.
 */
import { fmtMs, fmtNum, pct } from './format';
import type { ScenarioResult } from './types';

type Data = Record<string, number>;

function d(results: ScenarioResult[], name: string): Data | null {
  return results.find((r) => r.name === name && !r.error)?.data ?? null;
}

function met(results: ScenarioResult[], name: string, metricStart: string): boolean | undefined {
  return results.find((r) => r.name === name)?.figures.find((f) => f.metric.startsWith(metricStart))?.met;
}

const n = (v: number | undefined, digits?: number) => fmtNum(v ?? Number.NaN, digits);
const ms = (v: number | undefined) => fmtMs(v ?? Number.NaN);

export function renderAnalysis(results: ScenarioResult[], facts: Record<string, number>, source: string): string[] {
  const ff = facts.devicesFillfactor ?? 100;
  const drainChained = facts.drainChained === 1;
  const prepared = facts.ingestPrepared === 1;
  const pokeCarries = facts.pokeCarries === 1;
  const out: string[] = [];
  const p = (s: string) => out.push(s, '');
  const hs = d(results, 'handshake');
  const ing = d(results, 'ingest');
  const des = d(results, 'desired');
  const res = d(results, 'resume');
  const rsy = d(results, 'resync');
  const fl = d(results, 'fleet');

  out.push('## What limits the hub here, and what would fix it', '');
  p(
    `Every figure quoted below comes from this run; the mechanisms are those of the source measured (${source}). ` +
      (facts.gateway
        ? 'In it, token lookups, claims, ownership polls, admin statements and desired-state reads run on the warm connections of a few gateway objects (`src/hub/db/gateway.ts`, `DB_GATEWAY_SHARDS`, 4 by default); a session opens a connection of its own only to ingest. ' +
          (hs ? `A new Postgres connection would cost a backend start: ${ms(hs.pgConnectMs)} from Node through the driver and proxy${Number.isFinite(hs.pgbenchConnectMs) ? `, ${ms(hs.pgbenchConnectMs)} with pgbench -C straight to Postgres` : ''} on this VM.` : '')
        : 'The common thread: the hub opens a **new Postgres connection** in four places — the connect route (`src/hub/connect.ts`, token lookup), every new session object (`claimCluster` on its own `Pg`), every admin request (`requestPg` in `src/hub/admin/app.ts`), and every ownership poll of an idle session (its `Pg` closes after `PG_IDLE_CLOSE_MS` = 3 s, the poll runs every `POLL_INTERVAL_MS` = 5 s). ' +
          "A new connection costs a Postgres backend (a fork) plus the driver's start-up round trips; on this VM a fork alone is slow (pgbench -C, no proxy, no driver, measures the pure connection time)."),
  );

  if (hs && facts.gateway) {
    p(
      `**Handshake** (${met(results, 'handshake', 'connect → welcome, median') ? 'target met' : 'target missed'}: median ${ms(hs.hubMedianMs)}, target 15 ms; the bare ws server answers a hello in ${ms(hs.echoMs)}, Socket.IO connects in ${ms(hs.sioMs)}). ` +
        `The upgrade takes ${ms(hs.upgradeMs)} (the Worker hashes the token, asks a gateway shard — an RPC to another object and one query on its warm connection — then routes to a new session object) and hello → welcome ${ms(hs.helloToWelcomeMs)} (the new object claims ownership, again through the gateway). ` +
        `Postgres is a small part now: a query on an open connection takes ${ms(hs.pgQueryMs)} (a new connection would cost ${ms(hs.pgConnectMs)}, the gateway avoids it). The rest is workerd: ${n(hs.cpuPerConnectMs)} ms of workerd CPU per fresh handshake, most of it creating the new session object: a CPU profile of the isolate (\`--profile --only handshake\`) puts ~58% of its time in the native \`fetch\` by which the Worker reaches the new object (local workerd creates a SQLite database file on disk for every new object) and ~9% in SQLite \`exec\` (its schema and first writes); the two RPC hops to gateway objects, the Worker's routing and hashing are the rest, and locally the Worker, every session object and the gateway share one workerd process. A fresh session gets a new object by design (no or unroutable hint → new object), so this cost is per fresh session; a resume reuses its object. ` +
        `*Fix:* (1) cache token → cluster in the Worker isolate (positive results, ~60 s TTL) — safe because the claim re-checks registration, disablement and the token hash in the same statement, so a rotated or disabled token is still refused, at hello (4403) instead of at the upgrade: one RPC and one query less on every reconnect — not done, because the admission contract is that a rotated or disabled token creates no session object, and an isolate cache cannot be invalidated across isolates; (2) let the claim travel with the routing instead of after the hello (the Worker already knows the cluster and token hash; a fresh session could be claimed while the object is created), which takes a round trip out of hello → welcome; (3) profile a fresh object's construction (\`npm run bench -- --profile --only handshake\`) before trimming it.`,
    );
    const finished = Number.isFinite(hs.stormS);
    p(
      `**Storm** (${met(results, 'handshake', 'storm') ? 'target met' : 'target missed'}: ${finished ? `${n(hs.stormSize, 0)} operators welcomed in ${n(hs.stormS)} s (median of the repetitions)` : `in at least one repetition not all ${n(hs.stormSize, 0)} operators were welcomed within the ${n(hs.stormDeadlineS, 0)} s a storm is given (fewest welcomed: ${n(hs.stormWelcomedMin, 0)}; see the storm lines under the handshake section)`}, target 10 s). ` +
        `No connection is opened per operator any more (Postgres peaked at ${n(hs.stormPgPeak, 0)} client connections), so the storm is bounded by workerd and the gateway. workerd: ${Number.isFinite(hs.stormCpuS) ? `${n(hs.stormCpuS)} s of CPU over ${n(hs.stormWallS)} s per storm; ` : ''}${n(hs.cpuPerConnectMs)} ms per handshake × ${n(hs.stormSize, 0)} = ${n((hs.cpuPerConnectMs! * hs.stormSize!) / 1000)} s of CPU, and locally one workerd process runs the Worker, the ${n(hs.stormSize, 0)} new objects and the gateway. ` +
        `The gateway runs each shard's statements one at a time on its one connection (\`DB_GATEWAY_SHARDS\` = 4 by default), so ${n(2 * hs.stormSize!, 0)} lookups and claims queue there behind each other and behind the disconnect statements of sessions that close; a claim that waits too long is refused (1013: ${n(hs.storm1013 ?? 0, 0)} times), a hello not answered in 10 s is cut (4408: ${n(hs.storm4408 ?? 0, 0)}), a lookup that fails answers 503 (${n(hs.stormHttp503 ?? 0, 0)}); each refused operator then waits the SDK's backoff (base 1 s, doubling). ` +
        `*Fix:* (1) a Worker-side token cache (not adopted, see Handshake) would halve the gateway statements of a reconnect storm (the usual storm: a fleet coming back after a hub restart); (2) more shards, or pipelining several statements per shard connection (the Neon driver queues them on one connection anyway; the gateway could send without waiting); (3) admission control: answer 503 + Retry-After before touching the gateway when a shard's queue is long, instead of timing out deep in the handshake.`,
    );
  } else if (hs) {
    const twoConn = 2 * hs.pgConnectMs!;
    p(
      `**Handshake** (${met(results, 'handshake', 'connect → welcome, median') ? 'target met' : 'target missed'}: median ${ms(hs.hubMedianMs)}, target 15 ms). ` +
        `The upgrade takes ${ms(hs.upgradeMs)} (the Worker looks the token up on a new connection, then routes to a new object) and hello → welcome ${ms(hs.helloToWelcomeMs)} (the new object claims ownership on its own new connection). ` +
        `A new connection + first query costs ${ms(hs.pgConnectMs)} from Node through the same driver and proxy (${ms(hs.pgQueryMs)} on an open connection), about ${n(hs.pgCpuPerConnMs)} ms of Postgres CPU each (all postgres processes, so other users of the server are included)${Number.isFinite(hs.pgbenchConnectMs) ? `, and pgbench -C measures ${ms(hs.pgbenchConnectMs)} per connection straight to Postgres` : ''}: two of them (${ms(twoConn)}) already exceed the target. ` +
        `The rest is workerd itself: ${n(hs.cpuPerConnectMs)} ms of workerd CPU per fresh handshake (a new object creates its SQLite files, runs its schema, sets an alarm; two Neon connections are set up in JavaScript). The transport is not the problem: from the same client the bare ws server answers a hello in ${ms(hs.echoMs)} and Socket.IO connects in ${ms(hs.sioMs)}.`,
    );
    p(
      `*Fix:* take connection set-up out of the handshake path. (1) Cache token → cluster in the Worker isolate (positive results, ~60 s TTL) — safe because the object's claim re-checks registration, disablement and the token hash in the same statement, so a rotated or disabled token is still refused, at hello (4403) instead of at the upgrade; this removes one connection from every reconnect. (2) In production put the pool in front: Neon's pooled endpoint or Hyperdrive; locally, \`npm run bench -- --pooler\` runs the same scenarios with PgBouncer in transaction mode in front of Postgres (a new client connection then costs a pooler handshake instead of a fork). (3) Then the floor is two statements plus creating an object: 2 × ${ms(hs.pgQueryMs)} + the workerd work above.`,
    );
    const finished = Number.isFinite(hs.stormS);
    p(
      `**Storm** (${met(results, 'handshake', 'storm') ? 'target met' : 'target missed'}: ${finished ? `${n(hs.stormSize, 0)} operators welcomed in ${n(hs.stormS)} s` : `only ${n(hs.stormWelcomedMin, 0)} of ${n(hs.stormSize, 0)} operators welcomed within the ${n(hs.stormDeadlineS, 0)} s the storm is given`}, target 10 s). ` +
        `Postgres has max_connections = ${n(hs.maxConnections, 0)}; during the storm the server peaked at ${n(hs.stormPgPeak, 0)} client connections and ${n(hs.stormFailures, 0)} of ${n(hs.stormAttempts, 0)} attempts failed — the Worker answers 503 when its token lookup gets "too many clients", the object refuses with 1013 when its claim does, and a hello stuck behind a saturated database runs into the 10 s handshake timeout (4408) — after which each operator waits the SDK's jittered backoff (base 1 s, doubling, cap 30 s) and comes back in the next wave. Every rejected connection attempt still costs Postgres a backend start (~${n(hs.pgCpuPerConnMs)} ms of CPU here), so the waves keep the database saturated and few attempts complete. Even with no limit, ${n(hs.stormSize, 0)} × 2 connections × ~${n(hs.pgCpuPerConnMs)} ms is ${n((hs.stormSize! * 2 * hs.pgCpuPerConnMs!) / 1000)} s of Postgres CPU on 2 cores; and each welcomed session keeps its connection 3 s after the claim. *Fix:* pooling and the Worker-side cache (above) — with a pool the storm is bounded by workerd CPU (${n(hs.cpuPerConnectMs)} ms per handshake → ${n((hs.stormSize! * hs.cpuPerConnectMs!) / 1000)} s of CPU) — and admission control in the Worker (answer 503 + Retry-After *before* touching Postgres once a per-isolate count of in-flight lookups is reached, instead of letting every attempt fork a backend).`,
    );
  }

  if (ing) {
    const capped = ing.batchMedian! >= 1_999;
    p(
      `**Ingest, one session** (${met(results, 'ingest', 'one session') ? 'target met' : 'target missed'}: ${n(ing.hubFps, 0)} frames/s = ${pct(ing.fraction!)} of the echo ceiling ${n(ing.echoFps, 0)} frames/s; target 20,000 and 25%). ` +
        `${capped ? `Every batch is full (median ${n(ing.batchMedian, 0)} frames = \`INGEST_BATCH_FRAMES\`), so frames are waiting and the batch statement is the pace: ` : `Batches are not full (median ${n(ing.batchMedian, 0)} frames): `}` +
        `the hub's statement for a batch of ${n(ing.batchMedian, 0)} device rows takes ${ms(ing.stmtMs)} through the driver and proxy (${ms(ing.hubPsqlMs)} from psql straight), the minimal set-based upsert of the same rows ${ms(ing.minimalMs)} (${ms(ing.minimalPsqlMs)} straight); waiting on it is ${ing.dbShare! >= 0.95 ? 'all of the wall time (batches/s × statement time ≥ 95%: one statement is always in flight)' : `≈ ${pct(ing.dbShare!)} of the wall time`}. ` +
        (prepared
          ? `The hub prepares the statement once per connection (a named statement, \`INGEST_STATEMENT\` in src/hub/db/ingest.ts), so Postgres parses and rewrites its 34 CTEs once per connection instead of per batch: sent prepared from Node through the same driver and proxy it takes ${ms(ing.namedMs)}, against ${ms(ing.stmtMs)} unnamed (planning alone, as EXPLAIN SUMMARY reports it with the parameters bound: ${ms(ing.hubPlanMs)}; the minimal upsert's ${ms(ing.minimalPlanMs)} is mostly the cast of its ~500 KB JSON parameter to jsonb, which a custom plan does at planning). `
          : `The statement is sent unnamed, so Postgres parses, analyses, rewrites and plans its 34 CTEs on every batch: prepared once per connection (a named statement) the same statement takes ${ms(ing.namedMs)} through the same driver and proxy, against ${ms(ing.stmtMs)} unnamed (planning alone, as EXPLAIN SUMMARY reports it with the parameters bound: ${ms(ing.hubPlanMs)}; the minimal upsert's ${ms(ing.minimalPlanMs)} is mostly the cast of its ~500 KB JSON parameter to jsonb, which the custom plan does at planning). `) +
        (ff >= 100
          ? `The rows themselves are the rest: re-reported GPUs are UPDATEs, and at fillfactor 100 a page has no room for the new row version, so most updates are not HOT: the version goes to another page and both indexes get a new entry${Number.isFinite(ing.ff70Ms) ? `; with fillfactor 70 the same upsert took ${ms(ing.ff70Ms)} against ${ms(ing.ff100Ms)}` : ''}. `
          : `The rows themselves are the rest; \`devices\` is at fillfactor ${ff} (migration 0007), so re-reports can be HOT updates${Number.isFinite(ing.ff70Ms) ? ` (the same upsert on fresh table copies: ${ms(ing.ff70Ms)} at 70 against ${ms(ing.ff100Ms)} at 100)` : ''}. `) +
        `workerd spends ${n(ing.workerdUsPerFrame)} µs of CPU per frame (${n(ing.workerdCores)} cores at this rate) — a CPU profile of the isolate (bench/PROFILE.md, \`--profile\`) puts over a third of it in \`readFrame\` (\`decodeEnvelope\` and zod's validators for the envelope and the payload; zod 4 turns its compiled fast path off on Cloudflare — \`allowsEval\` checks the user agent — so every frame goes through the interpreted checks), about an eighth in GC, and most of the rest in building and writing the batch (\`JSON.stringify\` of the parameters in \`applyIngestBatch\`, the driver's \`rawWrite\`) — so the isolate itself tops out near ${n(1e6 / Math.max(1, ing.workerdUsPerFrame!), 0)} frames/s; Postgres spends ${n(ing.postgresUsPerFrame)} µs per frame.`,
    );
    p(
      prepared
        ? '*Next:* the isolate, not the database: a hand-written validator for the hot observed types instead of zod\'s interpreted path, and building the batch parameters without a `JSON.stringify` per table; then the rows themselves (the statement\'s share is what the minimal upsert cannot go below).'
        : `*Fix:* ${ff >= 100 ? '(0) \`fillfactor = 70\` on \`devices\`, \`nodes\`, \`observed_deployments\` (a migration) so re-reports are HOT updates; ' : ''}(1) prepare the batch statement once per connection — in \`applyIngestBatch\` (src/hub/db/ingest.ts) send \`{ name: 'ingest_v1', text: INGEST_SQL, values }\` (the session's \`Pg\` keeps its connection across batches, so the parse and plan are paid once per connection): ${ms(ing.stmtMs)} → ${ms(ing.namedMs)} per batch here, i.e. a database ceiling of ${n((ing.batchMedian! / ing.namedMs!) * 1000, 0)} instead of ${n((ing.batchMedian! / ing.stmtMs!) * 1000, 0)} frames/s (with PgBouncer < 1.21 in transaction mode named statements break; Neon's pooler supports them); (2) then the isolate: a hand-written validator for the hot observed types instead of zod's interpreted path.`,
    );
    p(
      `**Ingest, ${n(ing.sessions, 0)} sessions:** ${n(ing.multiFps, 0)} frames/s in total (echo ${n(ing.multiEchoFps, 0)}), ack p99 ${ms(ing.multiP99)}; workerd ${n(ing.multiWorkerdCores)} cores, Postgres ${n(ing.multiPostgresCores)} cores of the machine's 2. With many sessions the statements run concurrently on ${n(ing.sessions, 0)} connections and compete for the same two cores as workerd, the proxy and the load generator; per-row cost (above) is what to cut.`,
    );
  }

  if (des && facts.gateway) {
    p(
      `**Desired delivery** (${met(results, 'desired', 'single change') ? 'target met' : 'target missed'}: PUT → frame ${ms(des.hubMs)} against ${ms(des.sioMs)} for Socket.IO and ${ms(des.sioDbMs)} for Socket.IO with the same Postgres write; burst of ${n(des.burstN, 0)}: ${ms(des.hubBurstMs)} against ${ms(des.sioBurstMs)} / ${ms(des.sioDbBurstMs)}). ` +
        (pokeCarries
          ? `The admin PUT answers in ${ms(des.putMs)} (its one statement runs on a gateway connection: Worker → gateway object → Postgres); the statement returns the change, and the poke to the owning object (an RPC) carries it, so the object stamps and sends it without reading it back when nothing came between: three hops and one statement where Socket.IO + Postgres does one statement and an emit.${Number.isFinite(des.hubFloorMs) ? ` Of the ${ms(des.hubMs! - des.sioDbMs!)} difference, ${ms(des.hubFloorMs! - des.sioFloorMs!)} is the request's entry into the runtime: a GET that does no work (404) takes ${ms(des.hubFloorMs)} into the Worker against ${ms(des.sioFloorMs)} into Socket.IO's Node http server, so the hub's own path (statement, two object hops, stamping into the replay buffer and sending) is ${ms(des.hubMs! - des.hubFloorMs!)} against ${ms(des.sioDbMs! - des.sioFloorMs!)} for Socket.IO + Postgres.` : ''} `
          : `The admin PUT answers in ${ms(des.putMs)} (its statement now runs on a gateway connection); the change then reaches the operator by a poke to the owning object (an RPC), which fetches the change (another gateway statement) and sends it: three hops and two statements where Socket.IO + Postgres does one statement and an emit. `) +
        `A burst is serial twice over: every PUT for the cluster bumps \`clusters.desired_revision\` in its statement, so concurrent PUTs wait on that row lock until the previous one commits (observed as \`Lock: transactionid\` and \`IO: WALWrite\` waits in pg_stat_activity during a burst), and each gateway shard runs one statement at a time. ` +
        'Socket.IO without a database is not a fair target for a hub that must commit desired state before sending it; the same-work comparison is Socket.IO + Postgres.',
    );
    p(
      pokeCarries
        ? '*Fix:* (1) one hop less: run the admin write in the owning session object itself (the Worker routes the PUT to it; it runs the upsert through the gateway and sends the frame in the same turn), saving the Worker → object poke after the commit; (2) for bursts, batch: an endpoint that takes many deployments in one request and one set-based statement (one revision bump, one commit) — the per-change commit on one hot row is the limit, not the network. Each PUT here is its own request and its own commit, as the admin API fixes it.'
        : '*Fix:* (1) send the change from the PUT itself: route the admin write to the owning session object (an RPC like `poke`) and let it run the upsert and send the frame in the same turn (one statement, no poke, no fetch); (2) for bursts, batch: an endpoint that takes many deployments in one request and one set-based statement (one revision bump, one commit) — the per-change commit on one hot row is the limit, not the network.',
    );
  } else if (des) {
    p(
      `**Desired delivery** (${met(results, 'desired', 'single change') ? 'target met' : 'target missed'}: PUT → frame ${ms(des.hubMs)} against ${ms(des.sioMs)} for Socket.IO and ${ms(des.sioDbMs)} for Socket.IO with the same Postgres write; burst of ${n(des.burstN, 0)}: ${ms(des.hubBurstMs)} against ${ms(des.sioBurstMs)} / ${ms(des.sioDbBurstMs)}). ` +
        `The admin PUT alone answers in ${ms(des.putMs)}: \`requestPg\` opens a new connection for every admin request (Socket.IO + Postgres reuses one). The change then travels as a poke to the object, which fetches it (one statement on its own connection, often also new because it closes after 3 s idle) and sends it. In a burst, the admin requests serialise on connection set-up in Postgres (${hs ? `~${n(hs.pgCpuPerConnMs)} ms of CPU each` : 'a fork each'}) and on the row lock of \`clusters.desired_revision\`; ${drainChained ? 'the object side adds the drain issue below. ' : ''}` +
        `Socket.IO without a database is not a fair target for a hub that must commit desired state before sending it; the same-work comparison is Socket.IO + Postgres.`,
    );
    p(
      '*Fix:* (1) do the admin write on a connection that already exists: route `PUT /deployments` to the owning session object (an RPC like `poke`) and let it run the upsert on its open connection and send the frame in the same turn — one statement, no poke round trip, no fetch; (2) pooling as above.',
    );
  }

  if (rsy) {
    p(
      `**Full resync** (${met(results, 'resync', 'full resync') ? 'target met' : 'target missed'}: ${ms(rsy.totalMs)} end to end, target 3 s; Postgres alone does the same statements in ${ms(rsy.pgAloneMs)}). ` +
        `The hub→operator side finishes last (${ms(rsy.downMs)} for ${n(rsy.deployments, 0)} deployments); the operator's ${n(rsy.upFrames, 0)} frames are applied and pruned after ${ms(rsy.upMs)}. workerd spends ${n(rsy.workerdCpuS)} s of CPU per resync (${n((rsy.workerdCpuS! * 1e6) / (rsy.upFrames! + rsy.deployments!))} µs per frame either way) and its RSS peaks ${n(rsy.peakRssMiB! - rsy.rssBeforeMiB!)} MiB above where it started. ` +
        (drainChained
          ? 'Cause (CPU profile: `drain` is the top JavaScript function, with GC and SQLite \`exec\` behind it): `enqueue()` calls `drain()` once per frame, and `drain()` while a drain is running returns `this.draining.then(() => this.drain())` — so queuing a page of 1,000 frames chains ~1,000 promises, each of which re-enters `drain()` and chains again: O(n²) promise callbacks per page, and each round that finds the queue empty still runs `drainOnce()` → `saveMeta()`. *Fix:* coalesce drains (a `drainRequested` flag and one loop) and skip `saveMeta` when nothing was sent.'
          : facts.gateway
            ? `The O(n²) send-queue drain this benchmark's profile exposed (one chained promise per queued frame; GC was half of the isolate's time) is fixed in the measured source, and the snapshot reads now go through the gateway, so they no longer queue behind the session's ingest statements. What remains is mostly workerd CPU: ${n(rsy.workerdCpuS)} s of it in a ${ms(rsy.totalMs)} resync, for validating ${n(rsy.upFrames, 0)} frames up and stamping, storing (replay buffer in SQLite) and sending ${n(rsy.deployments, 0)} down, on the one thread that also runs everything else; Postgres alone needs ${ms(rsy.pgAloneMs)} for the same statements. The ingest fixes above (validation) apply here too.`
            : 'The O(n²) send-queue drain this benchmark\'s profile exposed (one chained promise per queued frame; GC was half of the isolate\'s time) is fixed in the measured source. What remains is serial by construction: the object has one Postgres connection, so the snapshot page reads wait behind the ingest statements of the operator\'s own snapshot (one statement per 2,000 frames), and each page is stamped into the replay buffer (SQLite) before it is sent. *Possible next step:* a second connection (or the gateway) for the desired-state reads, so the two directions overlap; expected: end to end ≈ the slower direction instead of their sum.'),
    );
  }

  if (res) {
    p(
      `**Resume** (both sides ${met(results, 'resume', 'resume,') ? 'met' : 'missed'}: ${ms(res.totalMs)} for ${n(res.n, 0)} frames each way, target 200 ms; hub→operator alone ${ms(res.downOnlyMs)} against Socket.IO's recovery ${ms(res.sioMs)}). ` +
        `The welcome alone takes ${ms(res.welcomeMs)} — ${facts.gateway ? 'the Worker\'s token lookup and the claim, each an RPC to a gateway shard and a statement' : 'the Worker\'s token lookup on a new connection plus the claim (the object\'s connection is still open after a short drop)'} — then the replay of ${n(res.n, 0)} frames from the object's SQLite arrives ${ms(res.downMs! - res.welcomeMs!)} later, and the operator's ${n(res.n, 0)} frames are acked (applied in Postgres) at ${ms(res.upMs)}${facts.gateway && hs ? ` — their first statement also has to open the session's own ingest connection, which this session had not needed before (a new connection: ~${ms(hs.pgConnectMs)} here)` : ''}. Socket.IO's recovery needs no database round trip at all. *Fix:* a Worker-side token cache (not adopted, see Handshake) ${facts.gateway ? '(one RPC and one statement less on reconnect)' : '(no connection on reconnect)'} leaves one claim statement (${hs ? ms(hs.pgQueryMs) : 'one round trip'}) in front of the replay${facts.gateway ? '; opening the ingest connection while the claim runs would take the connection set-up off the acked path (tried: it gained little here and held a connection for every resume that then sent nothing, so it was taken out)' : ''}.`,
    );
  }

  if (fl && facts.gateway) {
    const all = fl.established === fl.n;
    p(
      `**Idle fleet** (${met(results, 'fleet', 'workerd memory') ? 'target met' : 'target missed'}: ${all ? `all ${n(fl.n, 0)} sessions open` : `only ${n(fl.established, 0)} of ${n(fl.n, 0)} sessions could be opened in ${n(fl.openCapS, 0)} s`}; ${n(fl.perSessionKiB, 0)} KiB of workerd RSS per idle session on a fresh hub, target 50 KiB; a Node ws connection costs ${n(fl.echoKiB)} KiB and a Socket.IO one ${n(fl.sioKiB)} KiB). ` +
        `Every idle session is a live object: its alarm fires every 5 s for the ownership poll, shorter than the ~10 s after which an idle object is evicted, so none ever hibernates, and a live object costs far more than its socket. Most of it is not JavaScript: a one-off inspector probe (\`Runtime.getHeapUsage\` around 200 sessions on a fresh hub, earlier source) found ~100 KiB per session in the JS heap and the rest outside it — the object's own SQLite database and the runtime's per-object state. ` +
        `The polls now go through the gateway, so they open no connection: ${n(fl.xactsPerS)} transactions/s and ${n(fl.connsPerS)} new connections/s for ${n(fl.established, 0)} sessions, ${n(fl.pgCores)} cores of Postgres CPU (shared server), and workerd ${n(fl.cpuCores)} cores (${n((fl.cpuCores! * 1e6) / Math.max(1, fl.established!), 0)} µs per session per second).`,
    );
    p(
      '*Why it stays missed, and what would move it:* two fixed cadences keep each idle object awake — the design\'s 5 s ownership poll (DESIGN decision 4, an alarm per session) and the spec\'s 10 s operator ping, which the object must answer with a pong carrying its cursor (a per-frame answer, so the runtime\'s fixed auto-response cannot stand in for it) — while local workerd evicts an object only after ~10 s without an event. Moving the poll off the sessions (one set-based statement per gateway shard for all its clusters, poking only sessions whose claim, token or revision changed) would remove the alarm; the ping alone still lands at about the eviction delay, so objects would at best be evicted and rebuilt every ping, trading memory for a constructor and a SQLite open per session every 10 s. The 50 KiB target fits a runtime that keeps hibernated sockets without their objects; with one live object per session it is out of reach on this runtime, and we chose the spec\'s cadences over it.',
    );
  } else if (fl) {
    const all = fl.established === fl.n;
    p(
      `**Idle fleet** (${met(results, 'fleet', 'workerd memory') ? 'target met' : 'target missed'}: ${all ? `all ${n(fl.n, 0)} sessions open` : `only ${n(fl.established, 0)} of ${n(fl.n, 0)} sessions could be opened in ${n(fl.openCapS, 0)} s`}; ${n(fl.perSessionKiB, 0)} KiB of workerd RSS per open session (${n(fl.perObjectKiB, 0)} KiB per session object created, counting the ${n(fl.objects! - fl.established!, 0)} objects of refused attempts), target 50 KiB; a Node ws connection costs ${n(fl.echoKiB)} KiB and a Socket.IO one ${n(fl.sioKiB)} KiB). ` +
        `Memory: every idle session is a live object — its alarm fires every 5 s, shorter than the ~10 s after which an idle object is evicted, so none ever hibernates — and a live object costs far more than its socket: a one-off inspector probe (\`Runtime.getHeapUsage\` around 200 sessions on a fresh hub) put ~100 KiB per session in the JS heap and the rest of ~850 KiB outside it (the object's own SQLite database and the runtime's per-object state). ` +
        `Database: an idle session is never idle for Postgres either: its alarm polls ownership every 5 s and its connection closes after 3 s, so every poll opens a new connection — ${n(fl.connsPerS)} new connections/s and ${n(fl.xactsPerS)} transactions/s for ${n(fl.established, 0)} sessions here, ${n(fl.pgCores)} cores of Postgres CPU. At 1,000 sessions that would be 200 connections/s${hs ? ` × ~${n(hs.pgCpuPerConnMs)} ms = ${n((200 * hs.pgCpuPerConnMs!) / 1000)} cores` : ''}, more than this machine has, and with max_connections = 100 the polls (each holding a connection 3 s of every 5 s) cannot all be served: the sessions already open starve the ones being opened, which is why opening stops short.`,
    );
    p(
      '*Fix:* stop polling from idle sessions, so they can hibernate. Push the events the poll looks for instead: the claim statement can return the previous owner\'s session id so the new owner pokes it (displacement), and rotate-token/disable in the admin API can poke the owner the way PUT deployments does; keep only a slow safety-net poll (e.g. 60 s, longer than the eviction delay) and run it on the connection only while one is open. An idle object is then evicted between pings (its socket stays connected under the hibernation API), its memory is released, and Postgres sees nothing from an idle fleet. With pooling, whatever polls remain cost a pooled round trip instead of a fork.',
    );
  }
  return out;
}
