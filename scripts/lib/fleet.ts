/**
 * One view of a fleet spread over regions (scripts/fleet.ts). Each region is its own deployment
 * with its own registry and admin token, and no region can see another's data (that is the
 * point), so the view is assembled on the platform team's side from each region's admin API.
 */
import { z } from 'zod';

export interface RegionTarget {
  /** The region this endpoint is expected to serve. */
  region: string;
  /** The hub's origin, e.g. https://eu.hub.example.com */
  url: string;
  token: string;
}

export interface FleetCluster {
  region: string;
  name: string;
  uid: string;
  disabled: boolean;
  connected: boolean;
  session_id: string | null;
  location_hint: string | null;
  jurisdiction: string | null;
}

export interface RegionReport {
  target: RegionTarget;
  /** What the endpoint says it serves (GET /healthz), null for a hub that names no region. */
  reportedRegion: string | null;
  error: string | null;
  clusters: FleetCluster[];
}

const Health = z.object({ region: z.string().nullable().optional() }).loose();
const Page = z.object({
  clusters: z.array(
    z
      .object({
        uid: z.string(),
        name: z.string(),
        disabled: z.boolean(),
        location_hint: z.string().nullable().optional(),
        jurisdiction: z.string().nullable().optional(),
        session: z.object({ connected: z.boolean(), session_id: z.string() }).loose().nullable(),
      })
      .loose(),
  ),
  next: z.string().nullable(),
});

/** `eu=https://eu.hub.example.com` → region and URL. */
export function parseHubArg(arg: string): { region: string; url: string } {
  const eq = arg.indexOf('=');
  const region = arg.slice(0, eq);
  const url = arg.slice(eq + 1);
  if (eq < 1 || !/^[a-z0-9-]+$/.test(region) || !/^https?:\/\/[^/]+/.test(url)) {
    throw new Error(`--hub takes <region>=<https URL of that region's hub>, e.g. eu=https://eu.hub.example.com (got ${JSON.stringify(arg)})`);
  }
  return { region, url: url.replace(/\/+$/, '') };
}

/**
 * Every --hub argument, each region once: a region given twice would count each of its clusters
 * as registered in two regions (the problem this view exists to find), and which URL to believe
 * is the caller's to say.
 */
export function parseHubArgs(args: readonly string[]): { region: string; url: string }[] {
  const seen = new Map<string, string>();
  return args.map((arg) => {
    const hub = parseHubArg(arg);
    const earlier = seen.get(hub.region);
    if (earlier !== undefined) throw new Error(`--hub names region ${hub.region} twice (${earlier} and ${hub.url}): give each region once`);
    seen.set(hub.region, hub.url);
    return hub;
  });
}

/** WINGSMITH_ADMIN_TOKEN_EU for region eu (one token per region), else WINGSMITH_ADMIN_TOKEN. */
export function tokenVarFor(region: string): string {
  return `WINGSMITH_ADMIN_TOKEN_${region.toUpperCase().replace(/-/g, '_')}`;
}

export async function fetchRegion(target: RegionTarget, fetchImpl: typeof fetch = fetch): Promise<RegionReport> {
  const report: RegionReport = { target, reportedRegion: null, error: null, clusters: [] };
  const get = async (path: string, auth: boolean): Promise<unknown> => {
    const res = await fetchImpl(`${target.url}${path}`, {
      headers: auth ? { authorization: `Bearer ${target.token}` } : {},
      signal: AbortSignal.timeout(15_000),
    });
    const body = await res.json().catch(() => null);
    // /healthz answers 503 with its body when the database is down: still an answer about the region.
    if (!res.ok && !(path === '/healthz' && body)) throw new Error(`${path}: HTTP ${res.status}${body ? ` ${JSON.stringify(body)}` : ''}`);
    return body;
  };
  try {
    report.reportedRegion = Health.parse(await get('/healthz', false)).region ?? null;
    let after: string | null = null;
    do {
      const page = Page.parse(await get(`/admin/clusters?limit=500${after ? `&after=${encodeURIComponent(after)}` : ''}`, true));
      for (const c of page.clusters) {
        report.clusters.push({
          region: target.region,
          name: c.name,
          uid: c.uid,
          disabled: c.disabled,
          connected: c.session?.connected ?? false,
          session_id: c.session?.session_id ?? null,
          location_hint: c.location_hint ?? null,
          jurisdiction: c.jurisdiction ?? null,
        });
      }
      after = page.next;
    } while (after);
  } catch (err) {
    report.error = err instanceof Error ? err.message : String(err);
  }
  return report;
}

/**
 * What a platform team must hear about: a region it cannot see, an endpoint serving another
 * region than the one it is listed as (operators pointed at it would be in the wrong place), and
 * a cluster name enabled in more than one region (its operator can hold only one region's token:
 * the other registration is stale or a mistake). A disabled registration is not one: the admin
 * API cannot delete a registration, so disabling it is how a move between regions ends, and it
 * shows in the table instead (fleetTable).
 */
export function fleetProblems(reports: RegionReport[]): string[] {
  const problems: string[] = [];
  for (const r of reports) {
    if (r.error) problems.push(`${r.target.region} (${r.target.url}): unreachable or refused: ${r.error}`);
    else if (r.reportedRegion !== r.target.region) {
      problems.push(`${r.target.region} (${r.target.url}): that hub serves region ${r.reportedRegion ?? '(none)'}, not ${r.target.region}`);
    }
  }
  for (const [name, regions] of enabledRegionsByName(reports)) {
    if (regions.length > 1) problems.push(`cluster ${name} is enabled in ${regions.length} regions (${regions.join(', ')}): an operator holds one region's token; disable the stale one`);
  }
  return problems;
}

function enabledRegionsByName(reports: RegionReport[]): Map<string, string[]> {
  const byName = new Map<string, string[]>();
  for (const c of reports.flatMap((r) => r.clusters)) {
    if (!c.disabled) byName.set(c.name, [...(byName.get(c.name) ?? []), c.region]);
  }
  return byName;
}

/** A plain table, one line per cluster, sorted by region then name. */
export function fleetTable(reports: RegionReport[]): string {
  const enabled = enabledRegionsByName(reports);
  // A disabled registration whose name is enabled elsewhere is what a move leaves behind: say where it went.
  const state = (c: FleetCluster): string => {
    if (!c.disabled) return c.connected ? 'connected' : 'offline';
    const elsewhere = (enabled.get(c.name) ?? []).filter((r) => r !== c.region);
    return elsewhere.length ? `disabled(enabled:${elsewhere.join(',')})` : 'disabled';
  };
  const rows = reports
    .flatMap((r) => r.clusters)
    .sort((a, b) => a.region.localeCompare(b.region) || a.name.localeCompare(b.name))
    .map((c) => [c.region, c.name, c.uid, state(c), c.location_hint ?? '-', c.jurisdiction ?? '-']);
  const head = ['REGION', 'CLUSTER', 'UID', 'STATE', 'HINT', 'JURISDICTION'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  return [head, ...rows].map((r) => r.map((v, i) => v.padEnd(widths[i] as number)).join('  ').trimEnd()).join('\n');
}
