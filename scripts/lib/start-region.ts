/**
 * `HUB_REGION=eu npm start`: run one region's configuration (wrangler.toml's [env.eu]) on the
 * local stack, with its own state directory, so it can run beside the default hub (another PORT)
 * like a second regional deployment beside the first.
 *
 * The region's settings (HUB_REGION, HUB_JURISDICTION, DB_GATEWAY_LOCATION_HINT) come from its
 * wrangler environment and nowhere else, as they will when it is deployed. Local workerd has no
 * Durable Object jurisdictions, so a region that names one runs with HUB_JURISDICTION_EMULATION
 * (src/hub/region.ts): objects are addressed in an emulated jurisdiction and check it as on
 * Cloudflare.
 */
import path from 'node:path';
import { REGION_NAME_RE } from '../../src/hub/region';
import { DEFAULT_STATE_DIR } from './start-state';

/** A problem with the chosen region, fit to print as it stands. */
export class RegionError extends Error {}

/** Settings that belong to a region's wrangler environment, never to the shell's environment. */
export const REGION_VARS = ['HUB_REGION', 'HUB_JURISDICTION'] as const;

export interface StartRegion {
  /** The wrangler environment (and HUB_REGION) to run. */
  name: string;
  jurisdiction: string | null;
  /** The environment's own vars (strings only), which the shell's hub vars are run with. */
  vars: Record<string, string>;
}

/** The region asked for (HUB_REGION), checked before it names a directory; null: the default deployment. */
export function requestedRegion(env: NodeJS.ProcessEnv): string | null {
  const name = env.HUB_REGION;
  if (env.HUB_JURISDICTION) {
    throw new RegionError(
      'HUB_JURISDICTION is set by a region\'s environment in wrangler.toml, not by the shell; choose the region with HUB_REGION=<name>',
    );
  }
  if (name === undefined || name === '') return null;
  if (!REGION_NAME_RE.test(name)) throw new RegionError(`HUB_REGION must be a region name like eu (lowercase letters, digits, -), not ${JSON.stringify(name)}`);
  return name;
}

/** Where a region keeps its local state by default: beside the default hub's, not inside it. */
export function defaultStateDirFor(region: string | null): string {
  return region ? `${DEFAULT_STATE_DIR}-${region}` : DEFAULT_STATE_DIR;
}

interface WranglerConfigApi {
  experimental_readRawConfig(args: { config: string }): { rawConfig: { env?: Record<string, unknown> } };
  unstable_readConfig(args: { config: string; env?: string }, options?: { hideWarnings?: boolean }): { vars: Record<string, unknown> };
}

/** The region's environment in wrangler.toml, or a one-line error naming the ones that exist. */
export function resolveRegion(wrangler: WranglerConfigApi, configPath: string, name: string): StartRegion {
  const envs = Object.keys(wrangler.experimental_readRawConfig({ config: configPath }).rawConfig.env ?? {});
  if (!envs.includes(name)) {
    throw new RegionError(
      `no region ${name} in ${path.basename(configPath)} (regions: ${envs.join(', ') || 'none'}); unset HUB_REGION for the default deployment`,
    );
  }
  const vars = wrangler.unstable_readConfig({ config: configPath, env: name }, { hideWarnings: true }).vars;
  if (vars.HUB_REGION !== name) {
    throw new RegionError(`${path.basename(configPath)} [env.${name}] must set HUB_REGION = "${name}" in its vars (found ${JSON.stringify(vars.HUB_REGION ?? null)})`);
  }
  const j = vars.HUB_JURISDICTION;
  const strings = Object.fromEntries(Object.entries(vars).filter((e): e is [string, string] => typeof e[1] === 'string'));
  return { name, jurisdiction: typeof j === 'string' && j !== '' ? j : null, vars: strings };
}
