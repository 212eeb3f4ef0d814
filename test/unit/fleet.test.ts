import { describe, expect, it } from 'vitest';
import { fleetProblems, fleetTable, parseHubArg, parseHubArgs, tokenVarFor, type FleetCluster, type RegionReport } from '../../scripts/lib/fleet';

const cluster = (region: string, name: string, extra: Partial<FleetCluster> = {}): FleetCluster => ({
  region,
  name,
  uid: `uid-${name}`,
  disabled: false,
  connected: true,
  session_id: 's',
  location_hint: null,
  jurisdiction: region,
  ...extra,
});
const report = (region: string, clusters: FleetCluster[], extra: Partial<RegionReport> = {}): RegionReport => ({
  target: { region, url: `https://${region}.hub.test`, token: 't' },
  reportedRegion: region,
  error: null,
  clusters,
  ...extra,
});

describe('fleet view across regions', () => {
  it('reads --hub region=url and names each region\'s token variable', () => {
    expect(parseHubArg('eu=https://eu.hub.example.com/')).toEqual({ region: 'eu', url: 'https://eu.hub.example.com' });
    for (const bad of ['https://eu.hub.example.com', '=https://x', 'eu=', 'EU=https://x', 'eu=ftp://x']) expect(() => parseHubArg(bad)).toThrow(/--hub takes/);
    expect(tokenVarFor('us-east')).toBe('WINGSMITH_ADMIN_TOKEN_US_EAST');
  });

  it('refuses a region given twice, which would report every one of its clusters as registered in two regions', () => {
    expect(parseHubArgs(['eu=https://eu.hub.example.com', 'us=https://us.hub.example.com'])).toHaveLength(2);
    expect(() => parseHubArgs(['eu=https://eu.hub.example.com', 'eu=https://eu.hub.example.com/'])).toThrow(/region eu twice/);
  });

  it('a consistent fleet has no problems', () => {
    expect(fleetProblems([report('eu', [cluster('eu', 'a')]), report('us', [cluster('us', 'b')])])).toEqual([]);
  });

  it('reports a region it cannot see, an endpoint serving another region, and a cluster registered in two regions', () => {
    const problems = fleetProblems([
      report('eu', [cluster('eu', 'a'), cluster('eu', 'twice')]),
      report('us', [cluster('us', 'twice')], { reportedRegion: 'eu' }),
      report('apac', [], { error: 'HTTP 401' }),
    ]);
    expect(problems).toEqual([
      expect.stringMatching(/^us \(https:\/\/us.hub.test\): that hub serves region eu, not us/),
      expect.stringMatching(/^apac .*HTTP 401/),
      expect.stringMatching(/^cluster twice is enabled in 2 regions \(eu, us\)/),
    ]);
  });

  it("README's move procedure (register in the new region, then disable in the old one) leaves no standing problem", () => {
    // The admin API cannot delete a registration: disabling it is the last step there is.
    const moved = [report('eu', [cluster('eu', 'gpu-1', { disabled: true, connected: false })]), report('us', [cluster('us', 'gpu-1')])];
    expect(fleetProblems(moved)).toEqual([]);
    // Midway, while both are enabled, the name is flagged.
    expect(fleetProblems([report('eu', [cluster('eu', 'gpu-1')]), report('us', [cluster('us', 'gpu-1')])])).toEqual([
      expect.stringMatching(/^cluster gpu-1 is enabled in 2 regions \(eu, us\)/),
    ]);
    // The stale registration is information: the table says where the cluster went.
    const rows = fleetTable(moved).split('\n').slice(1).map((l) => l.split(/\s+/).slice(0, 4));
    expect(rows).toEqual([
      ['eu', 'gpu-1', 'uid-gpu-1', 'disabled(enabled:us)'],
      ['us', 'gpu-1', 'uid-gpu-1', 'connected'],
    ]);
  });

  it('prints one line per cluster, by region then name', () => {
    const table = fleetTable([
      report('us', [cluster('us', 'b', { connected: false, location_hint: 'enam' })]),
      report('eu', [cluster('eu', 'z', { disabled: true }), cluster('eu', 'a', { location_hint: 'weur' })]),
    ]).split('\n');
    expect(table[0]).toMatch(/^REGION\s+CLUSTER\s+UID\s+STATE\s+HINT\s+JURISDICTION$/);
    expect(table.slice(1).map((l) => l.split(/\s+/).slice(0, 5))).toEqual([
      ['eu', 'a', 'uid-a', 'connected', 'weur'],
      ['eu', 'z', 'uid-z', 'disabled', '-'],
      ['us', 'b', 'uid-b', 'offline', 'enam'],
    ]);
  });
});
