/**
 * `npm run fleet -- --hub eu=https://eu.hub.example.com --hub us=https://us.hub.example.com`
 *
 * The whole fleet across regions in one table: every cluster with its region, state, location
 * hint and jurisdiction, from each region's admin API. Each region's admin token comes from
 * WINGSMITH_ADMIN_TOKEN_<REGION> (e.g. WINGSMITH_ADMIN_TOKEN_EU), else WINGSMITH_ADMIN_TOKEN.
 * Problems (a region unreachable, an endpoint serving another region, a cluster registered in
 * two regions) go to stderr and make the exit status 1. `--json` prints the reports instead.
 */
import { parseArgs } from 'node:util';
import { fetchRegion, fleetProblems, fleetTable, parseHubArgs, tokenVarFor, type RegionTarget } from './lib/fleet';

const USAGE = `usage: npm run fleet -- --hub <region>=<url> [--hub <region>=<url> …] [--json]

  Admin tokens: WINGSMITH_ADMIN_TOKEN_<REGION> per region (e.g. WINGSMITH_ADMIN_TOKEN_EU),
  else WINGSMITH_ADMIN_TOKEN.`;

function targets(): { targets: RegionTarget[]; json: boolean } {
  const { values } = parseArgs({ options: { hub: { type: 'string', multiple: true }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help || !values.hub?.length) {
    console.log(USAGE);
    process.exit(values.help ? 0 : 2);
  }
  const list = parseHubArgs(values.hub).map(({ region, url }) => {
    const token = process.env[tokenVarFor(region)] || process.env.WINGSMITH_ADMIN_TOKEN;
    if (!token) throw new Error(`no admin token for region ${region}: set ${tokenVarFor(region)} (or WINGSMITH_ADMIN_TOKEN)`);
    return { region, url, token };
  });
  return { targets: list, json: values.json === true };
}

try {
  const { targets: list, json } = targets();
  const reports = await Promise.all(list.map((t) => fetchRegion(t)));
  const problems = fleetProblems(reports);
  if (json) {
    console.log(JSON.stringify(reports.map(({ target, ...r }) => ({ region: target.region, url: target.url, ...r })), null, 2));
  } else {
    console.log(fleetTable(reports));
    const n = reports.reduce((sum, r) => sum + r.clusters.length, 0);
    console.log(`\n${n} clusters in ${reports.filter((r) => !r.error).length} of ${reports.length} regions`);
  }
  for (const p of problems) console.error(`fleet: ${p}`);
  process.exitCode = problems.length > 0 ? 1 : 0;
} catch (err) {
  console.error(`fleet: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 2;
}
