/**
 * `npm run migrate`: applies the pending migrations to DATABASE_URL.
 *
 * A local or self-hosted Postgres is reached through an in-process WebSocket proxy, so the
 * migrations run over the same driver and protocol path as the hub; a Neon URL goes directly
 * (its direct host: a `-pooler` host is refused, see poolerRefusal). Each migration waits for a
 * lock at most briefly and retries for a bounded time (scripts/lib/migrations.ts), so running it
 * beside a serving hub does not hold the hub's writes; it fails naming the migration instead.
 *
 * With HUB_REGION set, the database is then claimed for that region (scripts/lib/migrate-region.ts),
 * or refused when another region's hub or migrate claimed it.
 */
import { migrate } from './lib/migrations';
import { claimRegionAtMigrate } from './lib/migrate-region';
import { errorText } from './lib/error-text';
import { isNeonUrl, pgTarget, probeTcp, redactUrl } from './lib/pg-node';
import { startPgWsProxy, type PgWsProxy } from './lib/pg-ws-proxy';

function fail(message: string): never {
  console.error(`migrate: ${message}`);
  process.exit(1);
}

async function main(): Promise<void> {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    fail('DATABASE_URL is not set (e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run migrate)');
  }
  const shown = redactUrl(databaseUrl);
  let proxy: PgWsProxy | undefined;
  if (!isNeonUrl(databaseUrl)) {
    let target: { host: string; port: number };
    try {
      target = pgTarget(databaseUrl);
    } catch (err) {
      fail(errorText(err));
    }
    const unreachable = await probeTcp(target.host, target.port, 3_000);
    if (unreachable) fail(`cannot reach Postgres at ${target.host}:${target.port} (${shown}): ${unreachable.message}`);
    proxy = await startPgWsProxy({ target });
  }
  try {
    const { applied, alreadyApplied, checksumsRecorded } = await migrate(databaseUrl, proxy?.url);
    if (checksumsRecorded.length > 0) console.log(`recorded the checksums of ${checksumsRecorded.length} migrations applied before the ledger kept them`);
    for (const m of applied) console.log(`applied ${m.file}`);
    console.log(
      applied.length === 0
        ? `up to date (${alreadyApplied.length} migrations applied earlier) on ${shown}`
        : `${applied.length} applied, ${alreadyApplied.length} earlier, on ${shown}`,
    );
    const region = process.env.HUB_REGION;
    if (region) {
      await claimRegionAtMigrate(databaseUrl, proxy?.url, region);
      console.log(`serves region ${region}`);
    }
  } catch (err) {
    fail(`${errorText(err)} (${shown})`);
  } finally {
    await proxy?.close();
  }
}

await main();
