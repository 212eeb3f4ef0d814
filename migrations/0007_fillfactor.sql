-- Observed rows are re-reported all the time (every node.observed, device.observed, ...): leave
-- room on each page so an update can be HOT (same page, no index entries). Measured on a batch of
-- 2,000 re-reported GPUs: 40.6 ms at fillfactor 100, 24.7 ms at 70 (bench/RESULTS.md).
alter table devices set (fillfactor = 70);
alter table nodes set (fillfactor = 70);
alter table observed_deployments set (fillfactor = 70);
alter table observed_clusters set (fillfactor = 70);
