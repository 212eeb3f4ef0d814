-- wingsmith:no-transaction
-- The fleet view (polled every second by each open dashboard) counts rejections "in the last
-- hour", fleet-wide and per cluster. Rejections are never deleted and a poisoning operator writes
-- one per frame, so without these the totals scanned the whole table and each cluster's count
-- walked every rejection that cluster ever had (rejections_recent is by id, not by time). With
-- them a read costs what the last hour holds.
--
-- Built CONCURRENTLY while the hub serves: a plain CREATE INDEX holds every session's writes of
-- rejections for as long as the build takes. That cannot run in a transaction, so this file runs
-- outside one, one index per step; IF NOT EXISTS lets a rerun after a failed step (or an index
-- built by hand) go on.
create index concurrently if not exists rejections_by_cluster_time on rejections (cluster_uid, received_at);
-- wingsmith:step
create index concurrently if not exists rejections_by_time on rejections (received_at);
