/**
 * `HUB_REGION=eu npm run migrate` claims the database for its region. Before, a database was
 * claimed by the first hub to reach it: two regions whose DATABASE_URL secrets were swapped each
 * claimed the other's fresh database for themselves and served it, though the README said the
 * second would be refused (found by a read-only review of the regions). Migrated with its region,
 * the database already belongs to it when the secrets are set.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';
import { copyDatabase } from '../../scripts/lib/dev-stack';
import { claimRegionAtMigrate } from '../../scripts/lib/migrate-region';
import { withPg } from '../../scripts/lib/pg-node';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const template = inject('databaseTemplate');

function migrateCli(databaseUrl: string, region: string): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'scripts/migrate.ts')], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: databaseUrl, HUB_REGION: region },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe.skipIf(template === null)('npm run migrate with HUB_REGION', () => {
  it('claims the database for that region, and refuses one claimed for another', async () => {
    const url = await copyDatabase(inject('databaseUrl'), inject('pgWsProxy'), template as string);
    const eu = migrateCli(url, 'eu');
    expect(eu, eu.out).toMatchObject({ status: 0, out: expect.stringContaining('serves region eu') });
    const rows = await withPg(url, inject('pgWsProxy'), async (c) => (await c.query<{ region: string }>('select region from hub_region')).rows);
    expect(rows).toEqual([{ region: 'eu' }]);
    // Again for the same region: nothing to do. For another: refused, naming both.
    expect(migrateCli(url, 'eu').status).toBe(0);
    const us = migrateCli(url, 'us');
    expect(us.status).toBe(1);
    expect(us.out).toMatch(/serves region eu, not us/);
    await expect(claimRegionAtMigrate(url, inject('pgWsProxy'), 'Not A Region')).rejects.toThrow(/not a region name/);
  }, 120_000);
});
