/**
 * What every region's environment in wrangler.toml must get right, checked before a deploy
 * (scripts/check-deploy.ts) and in the unit tests against the real file.
 *
 * Wrangler does not carry vars or bindings into an environment, and does carry routes and
 * migrations into one that sets none, an environment's own replacing the top level's (wrangler
 * 4.86's config code). So each region repeats what it must and sets what it must not inherit;
 * these rules catch the drift that copying invites. The top level is the default deployment and
 * is held to the same configuration rules as a region.
 */
import { z } from 'zod';
import { hubConfig } from '../../src/hub/config';
import { JURISDICTIONS } from '../../src/hub/region';
import { REFUSAL_BLOCK_MS } from '../../src/hub/connect-refusals';

const Binding = z.object({ name: z.string(), class_name: z.string(), script_name: z.string().optional() }).loose();
const Renamed = z.object({ from: z.string(), to: z.string() }).loose();
const Migration = z
  .object({
    tag: z.string(),
    new_classes: z.array(z.string()).optional(),
    new_sqlite_classes: z.array(z.string()).optional(),
    deleted_classes: z.array(z.string()).optional(),
    renamed_classes: z.array(Renamed).optional(),
  })
  .loose();
const Section = z
  .object({
    name: z.string().optional(),
    vars: z.record(z.string(), z.unknown()).optional(),
    durable_objects: z.object({ bindings: z.array(Binding).optional() }).optional(),
    ratelimits: z
      .array(z.object({ name: z.string(), namespace_id: z.union([z.string(), z.number()]).optional(), simple: z.object({ limit: z.number(), period: z.number() }).loose().optional() }).loose())
      .optional(),
    route: z.unknown().optional(),
    routes: z.array(z.unknown()).optional(),
    workers_dev: z.boolean().optional(),
    migrations: z.array(Migration).optional(),
  })
  .loose();
const RawConfig = Section.extend({ env: z.record(z.string(), Section).optional() });
type Section = z.infer<typeof Section>;

export interface Target {
  /** '' is the default (top-level) deployment. */
  env: string;
  workerName: string;
}

function bindingsOf(s: Section): string[] {
  return (s.durable_objects?.bindings ?? []).map((b) => `${b.name}=${b.class_name}${b.script_name ? `@${b.script_name}` : ''}`).sort();
}

/** The rate-limit bindings (connect-refusals.ts's CONNECT_REFUSALS): name and limit; each region's namespace is its own. */
function rateLimitsOf(s: Section): string[] {
  return (s.ratelimits ?? []).map((r) => `${r.name}${r.simple ? ` ${r.simple.limit}/${r.simple.period}s` : ''}`).sort();
}

/** The classes the migrations leave in place, and whether each is SQLite-backed. */
function classesAfter(migrations: z.infer<typeof Migration>[]): Map<string, 'sqlite' | 'kv'> {
  const out = new Map<string, 'sqlite' | 'kv'>();
  for (const m of migrations) {
    for (const c of m.new_classes ?? []) out.set(c, 'kv');
    for (const c of m.new_sqlite_classes ?? []) out.set(c, 'sqlite');
    for (const { from, to } of m.renamed_classes ?? []) {
      const kind = out.get(from);
      out.delete(from);
      if (kind) out.set(to, kind);
    }
    for (const c of m.deleted_classes ?? []) out.delete(c);
  }
  return out;
}

/**
 * The hub's objects keep their state in SQLite (ctx.storage.sql), which only a class created by
 * new_sqlite_classes has; a bound class the migrations never create, or delete, fails the deploy
 * or every request.
 */
function migrationProblems(where: string, s: Section): string[] {
  const classes = classesAfter(s.migrations ?? []);
  return (s.durable_objects?.bindings ?? [])
    .filter((b) => !b.script_name)
    .flatMap((b) => {
      const kind = classes.get(b.class_name);
      if (kind === 'sqlite') return [];
      return [`${where}: durable object class ${b.class_name} is ${kind ? 'not SQLite-backed (new_classes)' : 'not created by the migrations'}: it must be in new_sqlite_classes`];
    });
}

/**
 * Per deployment, never vars: the secrets are each region's own (its database in the region, its
 * admin token), and a var at the top level must be repeated with the same value in every region
 * (below), so a DATABASE_URL there would put every region on one registry, where a token issued
 * in one region is admitted in all. PG_WS_PROXY routes Postgres through a local proxy.
 */
const NOT_VARS: Record<string, string> = {
  DATABASE_URL: 'a secret of each deployment (wrangler secret put DATABASE_URL --env <region>): a region uses a database of its own',
  ADMIN_TOKEN: 'a secret of each deployment (wrangler secret put ADMIN_TOKEN --env <region>)',
  PG_WS_PROXY: 'for local development only: a deployed Worker talks to its database directly',
};

function notVarProblems(where: string, vars: Record<string, unknown>): string[] {
  return Object.keys(vars).filter((k) => k in NOT_VARS).map((k) => `${where}: vars.${k} must not be set: ${NOT_VARS[k]}`);
}

/**
 * What a section's vars say about regions that hubConfig cannot see: a TOML array or table
 * reaches the deployed Worker as JSON, not as the text a String() of it reads here; an empty
 * HUB_JURISDICTION reads as unset (no jurisdiction at all); and the emulation switch is for
 * local development only.
 */
function regionVarProblems(where: string, vars: Record<string, unknown>): string[] {
  const problems: string[] = [];
  for (const [k, v] of Object.entries(vars)) {
    if (v !== null && typeof v === 'object') problems.push(`${where}: vars.${k} is a TOML ${Array.isArray(v) ? 'array' : 'table'}; the Worker would get it as JSON: write it as a string`);
  }
  if (vars.HUB_JURISDICTION === '') problems.push(`${where}: vars.HUB_JURISDICTION is empty, which reads as no jurisdiction at all: name one or remove the line`);
  if (vars.HUB_JURISDICTION_EMULATION !== undefined) {
    problems.push(`${where}: HUB_JURISDICTION_EMULATION is for local development only; remove it from wrangler.toml`);
  }
  return problems;
}

/** Where hubConfig's complaint about a section's vars would stop the Worker at its first request. */
function configProblem(where: string, vars: Record<string, unknown>): string | null {
  try {
    hubConfig(Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, String(v)])));
    return null;
  } catch (err) {
    return `${where}: ${(err as Error).message}`;
  }
}

/**
 * The routes a deployment is actually given, as wrangler resolves them (4.86, deploy): `routes`
 * wins over `route`, and each is inherited from the top level on its own when the environment
 * leaves it unset. So a region that sets only `route` while the top level sets `routes` gets the
 * top level's, and one that sets neither gets them whatever its workers_dev says.
 */
function effectiveRoutes(s: Section, top: Section | null): unknown[] {
  const routes = s.routes ?? top?.routes;
  const route = s.route ?? top?.route;
  return routes ?? (route !== undefined ? [route] : []);
}

/**
 * The hostname a route claims, lowercased as DNS compares it. By host, not by pattern: the hub
 * serves fixed paths (/v1/connect, /admin), so two deployments on one host (a custom domain and a
 * `host/*` route, say) always send one's operators to the other.
 */
function routeHost(r: unknown): string {
  const pattern = typeof r === 'string' ? r : String((r as { pattern?: unknown }).pattern ?? JSON.stringify(r));
  return pattern.split('/')[0]!.toLowerCase();
}

/** Every deployment wrangler.toml defines, and the problems with its regions (empty: none). */
export function checkDeployConfig(raw: unknown): { targets: Target[]; problems: string[] } {
  const parsed = RawConfig.safeParse(raw);
  if (!parsed.success) return { targets: [], problems: [`wrangler.toml: ${parsed.error.issues[0]?.message ?? 'unreadable'}`] };
  const top = parsed.data;
  const topName = top.name ?? '';
  const problems: string[] = [];
  const targets: Target[] = [{ env: '', workerName: topName }];
  const topBindings = bindingsOf(top);
  const topVars = top.vars ?? {};
  const seenRoutes = new Map<string, string>(effectiveRoutes(top, null).map((r) => [routeHost(r), 'the default deployment']));
  const seenNames = new Map<string, string>([[topName, 'the default deployment']]);
  // The default deployment is a Worker too: its vars must make a configuration of their own.
  const topProblem = configProblem('top level (the default deployment)', topVars);
  if (topProblem) problems.push(topProblem);
  problems.push(...notVarProblems('top level', topVars));
  problems.push(...regionVarProblems('top level', topVars));
  problems.push(...migrationProblems('top level', top));
  // The connect route blocks an address for REFUSAL_BLOCK_MS once the binding says it is over:
  // the binding's period, or a block that ends before (or long after) the count does.
  for (const r of top.ratelimits ?? []) {
    if (r.name === 'CONNECT_REFUSALS' && r.simple && r.simple.period * 1000 !== REFUSAL_BLOCK_MS) {
      problems.push(`top level: ratelimits CONNECT_REFUSALS period is ${r.simple.period} s; the connect route blocks for ${REFUSAL_BLOCK_MS / 1000} s (src/hub/connect-refusals.ts REFUSAL_BLOCK_MS)`);
    }
  }
  const topMigrations = JSON.stringify(top.migrations ?? []);

  for (const [env, s] of Object.entries(top.env ?? {})) {
    const where = `[env.${env}]`;
    const workerName = s.name ?? `${topName}-${env}`;
    targets.push({ env, workerName });
    const other = seenNames.get(workerName);
    if (other) problems.push(`${where}: Worker name ${workerName} is also ${other}'s`);
    seenNames.set(workerName, where);

    // Not inherited: the same Durable Object classes, bound to this region's own Worker.
    const b = bindingsOf(s);
    if (JSON.stringify(b) !== JSON.stringify(topBindings)) {
      problems.push(`${where}: durable_objects bindings [${b.join(', ')}] differ from the top level's [${topBindings.join(', ')}] (bindings are not inherited)`);
    }
    // Not inherited either: without it a region's connect route counts no refusal (connect-refusals.ts).
    const limits = rateLimitsOf(s);
    if (JSON.stringify(limits) !== JSON.stringify(rateLimitsOf(top))) {
      problems.push(`${where}: ratelimits [${limits.join(', ')}] differ from the top level's [${rateLimitsOf(top).join(', ')}] (bindings are not inherited)`);
    }
    if ((s.durable_objects?.bindings ?? []).some((x) => x.script_name)) {
      problems.push(`${where}: a durable_objects binding names script_name: a region must keep its objects in its own Worker`);
    }

    // Not inherited: every top-level var, with the same value (one release line across regions).
    const vars = s.vars ?? {};
    for (const [k, v] of Object.entries(topVars)) {
      if (vars[k] !== v) problems.push(`${where}: vars.${k} is ${JSON.stringify(vars[k] ?? null)}, the top level says ${JSON.stringify(v)} (vars are not inherited)`);
    }
    if (vars.HUB_REGION !== env) problems.push(`${where}: vars.HUB_REGION must be "${env}" (the environment is the region)`);
    if (topVars.HUB_REGION === env) problems.push(`${where}: the top level's vars.HUB_REGION is "${env}" too: two deployments would serve one region (the top level is the default deployment, with no region or another)`);
    // A region named for a jurisdiction keeps its objects there: dropping or changing the line
    // would move new sessions out of it, and the objects already in it would be deleted as misplaced.
    // (A value that is no jurisdiction at all, or empty, is named by the checks of its own.)
    const named = vars.HUB_JURISDICTION;
    if ((JURISDICTIONS as readonly string[]).includes(env) && named !== env && (named === undefined || (JURISDICTIONS as readonly unknown[]).includes(named))) {
      problems.push(`${where}: vars.HUB_JURISDICTION is ${JSON.stringify(vars.HUB_JURISDICTION ?? null)}: a region named for a jurisdiction keeps its objects in it ("${env}"), or takes another name`);
    }
    problems.push(...regionVarProblems(where, vars).filter((p) => !(p.includes('HUB_JURISDICTION_EMULATION') && topVars.HUB_JURISDICTION_EMULATION !== undefined)));
    // Not again for a var the top level has: the top level's problem names it.
    problems.push(...notVarProblems(where, Object.fromEntries(Object.entries(vars).filter(([k]) => !(k in topVars)))));
    const bad = configProblem(where, vars);
    if (bad) problems.push(bad);

    // Inherited when unset, and then used instead of the top level's: an environment's own
    // migrations would give its Worker other classes than every other region's.
    if (s.migrations !== undefined && JSON.stringify(s.migrations) !== topMigrations) {
      problems.push(`${where}: migrations of its own that differ from the top level's (migrations are shared: remove them here)`);
    }

    // Inherited when unset: a region must name its own endpoint, or it would claim another's
    // (the default deployment's routes are then also this Worker's: a duplicate below).
    const routes = [...new Set(effectiveRoutes(s, top).map(routeHost))];
    if (routes.length === 0 && s.workers_dev !== true) {
      problems.push(`${where}: no route or routes of its own (routes are inherited from the top level; set this region's hostname)`);
    }
    for (const r of routes) {
      const owner = seenRoutes.get(r);
      if (owner) problems.push(`${where}: route ${r} is also ${owner}'s`);
      seenRoutes.set(r, where);
    }
  }
  return { targets, problems };
}
