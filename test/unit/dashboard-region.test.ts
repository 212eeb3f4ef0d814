/**
 * The dashboard's Region column (src/hub/dashboard/static/fleet.js). The admin API has three
 * placement facts that were once merged into one column: /admin/fleet's `region` (what the
 * operator reports in cluster.observed), /admin/clusters' `region` (the hub's own HUB_REGION) and
 * `location_hint` (where session objects run). The column is the first one only.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../scripts/lib/start-state';

/** The dashboard's own merge of /admin/fleet and /admin/clusters items (not exported: taken from the file as it stands). */
function dashboardMerge(): (f: any, c: any) => any {
  const src = readFileSync(path.join(REPO_ROOT, 'src/hub/dashboard/static/fleet.js'), 'utf8');
  const m = /function merge\(f, c\) \{[\s\S]*?\n\}/.exec(src);
  if (!m) throw new Error('merge() not found in fleet.js');
  return new Function(`${m[0]}; return merge;`)() as (f: any, c: any) => any;
}

const fleetItem = (region: string | null) => ({ uid: 'u1', name: 'a', disabled: false, connected: true, region });
const listItem = (region: string | null, hint: string | null) => ({ uid: 'u1', name: 'a', region, jurisdiction: region, location_hint: hint, contention: null });

describe("the dashboard's Region column", () => {
  it('never shows a location hint as the cluster region', () => {
    // Default deployment, an operator that has not reported cluster.observed yet, registered with a hint.
    expect(dashboardMerge()(fleetItem(null), listItem(null, 'enam')).region).toBeNull();
  });

  it("never shows the hub's own region as the cluster region", () => {
    // A regional hub (HUB_REGION=eu) whose operator has not reported a region.
    expect(dashboardMerge()(fleetItem(null), listItem('eu', 'weur')).region).toBeNull();
  });

  it('shows the region the operator reports, on any hub', () => {
    const merge = dashboardMerge();
    expect(merge(fleetItem('us-east4'), listItem('eu', 'weur')).region).toBe('us-east4');
    expect(merge(fleetItem('us-east4'), listItem(null, null)).region).toBe('us-east4');
    expect(merge(fleetItem('us-east4'), undefined).region).toBe('us-east4');
  });
});
