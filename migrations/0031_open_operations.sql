-- wingsmith:no-transaction
-- A fresh session's first snapshot page asks whether its cluster has an open operation (every
-- claim of a fresh session), and its resync then reads them: `concluded_at is null` was applied to
-- every operation of the cluster the index by revision found, the concluded ones kept for
-- OPERATIONS_RETENTION_MS (90 days) included; with tens of thousands of them the planner scanned
-- the whole table for each (test/hub/open-operations-read-cost.test.ts). Open operations are few:
-- this index holds only them.
--
-- Built CONCURRENTLY while the hub serves (see 0017).
create index concurrently if not exists operations_open on operations (cluster_uid, revision) where concluded_at is null;
