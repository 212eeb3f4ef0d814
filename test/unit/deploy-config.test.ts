/**
 * The regions in wrangler.toml stay consistent (scripts/lib/deploy-config.ts): the real file has
 * none of the problems, and each rule catches the drift it is for.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { experimental_readRawConfig } from 'wrangler';
import { REPO_ROOT } from '../../scripts/lib/start-state';
import { checkDeployConfig } from '../../scripts/lib/deploy-config';
import { hubConfig } from '../../src/hub/config';

const BINDINGS = {
  bindings: [
    { name: 'SESSIONS', class_name: 'SessionObject' },
    { name: 'DB_GATEWAY', class_name: 'DbGateway' },
  ],
};
const MIGRATIONS = [
  { tag: 'v1', new_sqlite_classes: ['SessionObject'] },
  { tag: 'v2', new_sqlite_classes: ['DbGateway'] },
];

function config(eu: Record<string, unknown>, top: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: 'hub',
    vars: { HUB_VERSION: '0.1.0' },
    durable_objects: BINDINGS,
    migrations: MIGRATIONS,
    ...top,
    env: {
      eu: {
        routes: [{ pattern: 'eu.hub.example.com', custom_domain: true }],
        vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' },
        durable_objects: BINDINGS,
        ...eu,
      },
    },
  };
}

describe('wrangler.toml regions', () => {
  it('the repository\'s wrangler.toml: the default deployment and every region, consistent', () => {
    const raw = experimental_readRawConfig({ config: path.join(REPO_ROOT, 'wrangler.toml') }).rawConfig;
    const { targets, problems } = checkDeployConfig(raw);
    expect(problems).toEqual([]);
    expect(targets).toEqual([
      { env: '', workerName: 'wingsmith-hub' },
      { env: 'eu', workerName: 'wingsmith-hub-eu' },
      { env: 'us', workerName: 'wingsmith-hub-us' },
    ]);
  });

  it('a consistent region passes; its Worker name defaults as wrangler names it', () => {
    expect(checkDeployConfig(config({}))).toEqual({
      targets: [
        { env: '', workerName: 'hub' },
        { env: 'eu', workerName: 'hub-eu' },
      ],
      problems: [],
    });
  });

  it('catches what is not inherited and was not repeated', () => {
    expect(checkDeployConfig(config({ durable_objects: undefined })).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: durable_objects bindings \[\] differ .*not inherited/),
    ]);
    expect(checkDeployConfig(config({ vars: { HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' } })).problems).toEqual([
      expect.stringMatching(/vars.HUB_VERSION is null, the top level says "0.1.0"/),
    ]);
    expect(checkDeployConfig(config({ vars: { HUB_VERSION: '0.2.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' } })).problems).toEqual([
      expect.stringMatching(/vars.HUB_VERSION is "0.2.0"/),
    ]);
    const limits = { ratelimits: [{ name: 'CONNECT_REFUSALS', namespace_id: '7301', simple: { limit: 20, period: 10 } }] };
    expect(checkDeployConfig(config({}, limits)).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: ratelimits \[\] differ from the top level's \[CONNECT_REFUSALS 20\/10s\] .*not inherited/),
    ]);
    expect(checkDeployConfig(config({ ratelimits: [{ name: 'CONNECT_REFUSALS', namespace_id: '7302', simple: { limit: 200, period: 60 } }] }, limits)).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: ratelimits \[CONNECT_REFUSALS 200\/60s\] differ from the top level's \[CONNECT_REFUSALS 20\/10s\]/),
    ]);
    expect(checkDeployConfig(config({ ratelimits: [{ name: 'CONNECT_REFUSALS', namespace_id: '7302', simple: { limit: 20, period: 10 } }] }, limits)).problems).toEqual([]);
    const minute = { ratelimits: [{ name: 'CONNECT_REFUSALS', namespace_id: '7301', simple: { limit: 20, period: 60 } }] };
    expect(checkDeployConfig(config({ ratelimits: [{ name: 'CONNECT_REFUSALS', namespace_id: '7302', simple: { limit: 20, period: 60 } }] }, minute)).problems).toEqual([
      expect.stringMatching(/top level: ratelimits CONNECT_REFUSALS period is 60 s; the connect route blocks for 10 s/),
    ]);
  });

  it('catches a region that is not named as its environment, a bad jurisdiction, or the local emulation', () => {
    expect(checkDeployConfig(config({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'us', HUB_JURISDICTION: 'eu' } })).problems).toEqual([
      expect.stringMatching(/HUB_REGION must be "eu"/),
    ]);
    expect(checkDeployConfig(config({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'mars' } })).problems).toEqual([
      expect.stringMatching(/HUB_JURISDICTION/),
    ]);
    expect(
      checkDeployConfig(config({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', HUB_JURISDICTION_EMULATION: '1' } })).problems,
    ).toEqual([expect.stringMatching(/HUB_JURISDICTION_EMULATION is for local development only/)]);
  });

  it('catches objects bound to another Worker, and routes inherited or shared', () => {
    const shared = { bindings: BINDINGS.bindings.map((b) => ({ ...b, script_name: 'hub' })) };
    expect(checkDeployConfig(config({ durable_objects: shared })).problems).toEqual(
      expect.arrayContaining([expect.stringMatching(/script_name: a region must keep its objects in its own Worker/)]),
    );
    expect(checkDeployConfig(config({ routes: undefined })).problems).toEqual([expect.stringMatching(/no route or routes of its own/)]);
    expect(checkDeployConfig(config({ routes: undefined, workers_dev: true })).problems).toEqual([]);
    const twice = config({});
    (twice.env as Record<string, unknown>).us = {
      ...((twice.env as Record<string, Record<string, unknown>>).eu as Record<string, unknown>),
      vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'us', HUB_JURISDICTION: 'us' },
    };
    expect(checkDeployConfig(twice).problems).toEqual([expect.stringMatching(/\[env.us\]: route eu.hub.example.com is also \[env.eu\]'s/)]);
  });

  it("catches a region with migrations of its own (wrangler then uses them instead of the top level's); the same ones repeated pass", () => {
    expect(checkDeployConfig(config({ migrations: [{ tag: 'v1', new_classes: ['SessionObject'] }] })).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: migrations of its own that differ from the top level's/),
    ]);
    expect(checkDeployConfig(config({ migrations: MIGRATIONS })).problems).toEqual([]);
  });

  it('catches a bound class the migrations never create, delete, or create without SQLite', () => {
    expect(checkDeployConfig(config({}, { migrations: [MIGRATIONS[0]] })).problems).toEqual([
      expect.stringMatching(/top level: durable object class DbGateway is not created by the migrations/),
    ]);
    expect(checkDeployConfig(config({}, { migrations: [...MIGRATIONS, { tag: 'v3', deleted_classes: ['DbGateway'] }] })).problems).toEqual([
      expect.stringMatching(/class DbGateway is not created by the migrations/),
    ]);
    expect(checkDeployConfig(config({}, { migrations: [{ tag: 'v1', new_classes: ['SessionObject'] }, MIGRATIONS[1]] })).problems).toEqual([
      expect.stringMatching(/class SessionObject is not SQLite-backed/),
    ]);
    const renamed = [{ tag: 'v1', new_sqlite_classes: ['Session'] }, MIGRATIONS[1], { tag: 'v3', renamed_classes: [{ from: 'Session', to: 'SessionObject' }] }];
    expect(checkDeployConfig(config({}, { migrations: renamed })).problems).toEqual([]);
  });

  it('catches a top level whose vars are not a hub configuration (the default deployment would throw on every request)', () => {
    expect(() => hubConfig({ HUB_VERSION: '0.1.0', HUB_JURISDICTION: 'eu' })).toThrow(/needs HUB_REGION/);
    const top = { vars: { HUB_VERSION: '0.1.0', HUB_JURISDICTION: 'eu' } };
    expect(checkDeployConfig(config({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' } }, top)).problems).toEqual([
      expect.stringMatching(/top level \(the default deployment\): .*HUB_JURISDICTION: needs HUB_REGION/),
    ]);
  });

  it("catches a gateway location hint outside the region's jurisdiction, the rule the admin API applies to a cluster's hint", () => {
    const vars = (hint: string) => ({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu', DB_GATEWAY_LOCATION_HINT: hint } });
    expect(checkDeployConfig(config(vars('wnam'))).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: .*DB_GATEWAY_LOCATION_HINT: location hint wnam lies outside jurisdiction eu/),
    ]);
    expect(checkDeployConfig(config(vars('weur'))).problems).toEqual([]);
  });
});

/** Regions given as wrangler.toml writes them: the top level's keys, then `env`. */
const EU_VARS = { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' };
const US_VARS = { HUB_VERSION: '0.1.0', HUB_REGION: 'us', HUB_JURISDICTION: 'us' };

function withRegions(top: Record<string, unknown>, env: Record<string, Record<string, unknown>>): Record<string, unknown> {
  return { name: 'hub', vars: { HUB_VERSION: '0.1.0' }, durable_objects: BINDINGS, migrations: MIGRATIONS, ...top, env };
}

/**
 * check:deploy refuses a region whose Worker would take the hostname of another deployment, as
 * wrangler 4.86 resolves routes (routes over route, each inherited from the top level when unset),
 * and as Cloudflare compares hostnames (case-insensitively, whatever the path).
 */
describe('check:deploy: a region never deploys onto another deployment\'s hostname', () => {
  it('a region on workers.dev without routes of its own still inherits the top level\'s routes: refused', () => {
    const raw = withRegions(
      { routes: [{ pattern: 'hub.example.com', custom_domain: true }] },
      { eu: { workers_dev: true, vars: EU_VARS, durable_objects: BINDINGS } },
    );
    expect(checkDeployConfig(raw).problems).toEqual([expect.stringMatching(/\[env.eu\]: route hub.example.com is also the default deployment's/)]);
  });

  it("a region's own `route` is ignored when the top level sets `routes` (wrangler prefers routes, inherited): refused", () => {
    const raw = withRegions(
      { routes: [{ pattern: 'hub.example.com', custom_domain: true }] },
      { eu: { route: 'eu.hub.example.com/*', vars: EU_VARS, durable_objects: BINDINGS } },
    );
    expect(checkDeployConfig(raw).problems).toEqual([expect.stringMatching(/\[env.eu\]: route hub.example.com is also the default deployment's/)]);
  });

  it('two regions on one hostname, spelled differently (case, a custom domain and a host/* route): refused', () => {
    const raw = withRegions({}, {
      eu: { routes: [{ pattern: 'eu.hub.example.com', custom_domain: true }], vars: EU_VARS, durable_objects: BINDINGS },
      us: { routes: [{ pattern: 'EU.hub.example.com/*', zone_name: 'example.com' }], vars: US_VARS, durable_objects: BINDINGS },
    });
    expect(checkDeployConfig(raw).problems).toEqual([expect.stringMatching(/\[env.us\]: route eu.hub.example.com is also \[env.eu\]'s/)]);
  });

  it('control: regions on hostnames of their own, one with several routes on its host, pass', () => {
    const raw = withRegions({ routes: [{ pattern: 'hub.example.com', custom_domain: true }] }, {
      eu: { routes: ['eu.hub.example.com/v1/*', 'eu.hub.example.com/admin/*'], vars: EU_VARS, durable_objects: BINDINGS },
      us: { routes: [{ pattern: 'us.hub.example.com', custom_domain: true }], vars: US_VARS, durable_objects: BINDINGS },
    });
    expect(checkDeployConfig(raw).problems).toEqual([]);
  });
});

/**
 * check:deploy refuses a deployment whose database, admin token or Postgres proxy is a var: vars
 * are committed, and a top-level var must be repeated by every region, so a DATABASE_URL there
 * would put every region on one registry (a token of one region admitted in all).
 */
describe('check:deploy: no deployment takes its database, admin token or Postgres proxy from vars', () => {
  it('a DATABASE_URL in the top level\'s vars (which every region must repeat: one registry for all regions) is refused', () => {
    const db = 'postgres://hub@db.example.com/hub';
    const raw = withRegions({ vars: { HUB_VERSION: '0.1.0', DATABASE_URL: db } }, {
      eu: { routes: [{ pattern: 'eu.hub.example.com', custom_domain: true }], vars: { ...EU_VARS, DATABASE_URL: db }, durable_objects: BINDINGS },
      us: { routes: [{ pattern: 'us.hub.example.com', custom_domain: true }], vars: { ...US_VARS, DATABASE_URL: db }, durable_objects: BINDINGS },
    });
    expect(checkDeployConfig(raw).problems).toEqual([expect.stringMatching(/top level: vars.DATABASE_URL must not be set/)]);
  });

  it("a region's ADMIN_TOKEN or PG_WS_PROXY in its vars is refused", () => {
    const raw = withRegions({}, {
      eu: { routes: [{ pattern: 'eu.hub.example.com', custom_domain: true }], vars: { ...EU_VARS, ADMIN_TOKEN: 'x', PG_WS_PROXY: '127.0.0.1:1' }, durable_objects: BINDINGS },
    });
    expect(checkDeployConfig(raw).problems).toEqual([
      expect.stringMatching(/\[env.eu\]: vars.ADMIN_TOKEN must not be set/),
      expect.stringMatching(/\[env.eu\]: vars.PG_WS_PROXY must not be set/),
    ]);
  });
});

// Each passed check:deploy before (found by a review), and each would put a region's objects
// where it does not mean them, or stop its Worker at its first request.
describe('check:deploy and the jurisdiction of a region', () => {
  const eu = (vars: Record<string, unknown>) => config({ vars: { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', ...vars } });

  it('a region named for a jurisdiction keeps its objects there: another jurisdiction, none, or an empty value is refused, naming the environment and the variable', () => {
    expect(checkDeployConfig(eu({ HUB_JURISDICTION: 'eu' })).problems).toEqual([]);
    for (const vars of [{ HUB_JURISDICTION: 'us', DB_GATEWAY_LOCATION_HINT: 'enam' }, {}, { HUB_JURISDICTION: '' }]) {
      expect(checkDeployConfig(eu(vars)).problems, JSON.stringify(vars)).toEqual([expect.stringMatching(/\[env\.eu\].*HUB_JURISDICTION/)]);
    }
  });

  it('a top level that serves a region an environment serves too is refused: two deployments for one region', () => {
    const regional = { HUB_VERSION: '0.1.0', HUB_REGION: 'eu', HUB_JURISDICTION: 'eu' };
    expect(checkDeployConfig(config({ vars: regional }, { vars: regional })).problems).toEqual(
      expect.arrayContaining([expect.stringMatching(/\[env\.eu\].*top level's vars.HUB_REGION is "eu" too/)]),
    );
  });

  it('the local emulation switch is refused in the default deployment too', () => {
    const raw = config({}, { vars: { HUB_VERSION: '0.1.0', HUB_JURISDICTION_EMULATION: '1' } });
    delete raw.env;
    expect(checkDeployConfig(raw).problems).toEqual([expect.stringMatching(/top level.*HUB_JURISDICTION_EMULATION/)]);
  });

  it('a var written as a TOML array (the Worker gets it as JSON, which its configuration refuses) is refused, not read through String()', () => {
    expect(checkDeployConfig(eu({ HUB_JURISDICTION: ['eu'] })).problems).toEqual([expect.stringMatching(/\[env\.eu\].*HUB_JURISDICTION is a TOML array/)]);
  });
});
