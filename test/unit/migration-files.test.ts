/**
 * What the migration runner reads before it touches a database (scripts/lib/migrations.ts): the
 * directives of a migration file (`-- wingsmith:no-transaction` as its first line, then
 * `-- wingsmith:step` between statements), refused when misspelt or misplaced, and a CREATE INDEX
 * CONCURRENTLY refused without IF NOT EXISTS (a step that is run again must succeed); and a Neon
 * `-pooler` host refused for migrating (a transaction-mode pooler keeps no session, so the
 * runner's advisory lock would leak onto a pooled connection and serialize nothing).
 */
import { describe, expect, it } from 'vitest';
import { migrate, parseMigration, poolerRefusal, readMigrations } from '../../scripts/lib/migrations';
import { SCHEMA_REQUIRED } from '../../src/hub/db/schema-version';

describe('migration files', () => {
  it("the hub's required schema (what /healthz checks) is the newest migration file: a new migration must raise it", async () => {
    const files = await readMigrations();
    expect(files.length).toBeGreaterThan(0);
    expect(SCHEMA_REQUIRED).toBe(files[files.length - 1]!.version);
  });

  it('a plain file is one transactional step; a no-transaction file is split at its step lines', () => {
    expect(parseMigration('0001_a.sql', 'create table t (x int);\ncreate index on t (x);\n')).toEqual({
      transaction: true,
      steps: ['create table t (x int);\ncreate index on t (x);\n'],
    });
    const text = '-- wingsmith:no-transaction\n-- why\ncreate index concurrently if not exists a on t (x);\n-- wingsmith:step\n\n-- wingsmith:step\ncreate index concurrently if not exists "b" on t (y);\n';
    const parsed = parseMigration('0002_b.sql', text);
    expect(parsed.transaction).toBe(false);
    expect(parsed.steps.map((s) => s.trim())).toEqual([
      '-- wingsmith:no-transaction\n-- why\ncreate index concurrently if not exists a on t (x);',
      'create index concurrently if not exists "b" on t (y);',
    ]);
  });

  it('misspelt or misplaced directives and a concurrent index without IF NOT EXISTS are refused, naming the file', () => {
    expect(() => parseMigration('0003_c.sql', '-- wingsmith:no-transactions\ncreate index concurrently if not exists a on t (x);')).toThrow(/0003_c\.sql: "-- wingsmith:no-transactions" is not a directive/);
    expect(() => parseMigration('0003_c.sql', 'select 1;\n-- wingsmith:no-transaction\n')).toThrow(/0003_c\.sql/);
    expect(() => parseMigration('0003_c.sql', 'select 1;\n-- wingsmith:step\nselect 2;')).toThrow(/0003_c\.sql: "-- wingsmith:step" is not a directive here/);
    expect(() => parseMigration('0003_c.sql', '-- wingsmith:no-transaction\nCREATE UNIQUE INDEX CONCURRENTLY a ON t (x);')).toThrow(/0003_c\.sql: CREATE INDEX CONCURRENTLY needs IF NOT EXISTS/);
  });

  it("the repository's index migrations run outside a transaction, one index per step", async () => {
    const byFile = new Map((await readMigrations()).map((m) => [m.file, m]));
    expect(byFile.get('0017_rejections_by_time.sql')).toMatchObject({ transaction: false, steps: [expect.stringMatching(/rejections_by_cluster_time/), expect.stringMatching(/rejections_by_time/)] });
    expect(byFile.get('0018_operation_history_order.sql')).toMatchObject({ transaction: false, steps: [expect.stringMatching(/operation_events_in_order/)] });
    expect(byFile.get('0016_observed_counts_bigint.sql')?.transaction).toBe(true);
  });
});

describe('a pooler host', () => {
  it('is refused for migrating, pointing at the direct host; a direct or local host is not', () => {
    expect(poolerRefusal('postgres://u:p@ep-cool-night-123456-pooler.us-east-2.aws.neon.tech/db?sslmode=require')).toMatch(
      /connection pooler \(ep-cool-night-123456-pooler\.us-east-2\.aws\.neon\.tech\).*direct host \(ep-cool-night-123456\.us-east-2\.aws\.neon\.tech\)/,
    );
    expect(poolerRefusal('postgres://u:p@ep-cool-night-123456.us-east-2.aws.neon.tech/db')).toBeNull();
    expect(poolerRefusal('postgres://postgres@127.0.0.1:5432/postgres')).toBeNull();
    expect(poolerRefusal('not a url')).toBeNull();
  });

  it('migrate() refuses it before connecting', async () => {
    await expect(migrate('postgres://u:p@ep-x-1-pooler.eu-central-1.aws.neon.tech/db', undefined)).rejects.toThrow(/connection pooler/);
  });
});
