-- The admin lists (GET /admin/clusters, GET /admin/fleet: 500 clusters a page, the dashboard's page
-- size, polled every second) look up each listed cluster's rows by a uid the planner does not know
-- when it plans (a correlated subquery per cluster). It estimates the rows one uid holds as the
-- table divided by the distinct uids ANALYZE saw. When one or a few clusters own a table (one big
-- cluster connected among thousands registered, deployments or a poisoning operator's rejections
-- in one cluster), that is the whole table, so the planner scanned it whole once per listed
-- cluster: with one cluster of 100,000 deployments and GPUs among 5,000, 4.8 s for a fleet page of
-- 500 and 2.7 s for a cluster list page, every page alike, growing with the big cluster towards
-- the statement deadline (test/hub/admin-lists-at-scale.test.ts).
--
-- A fixed ratio instead (negative n_distinct: distinct uids as a fraction of the rows): at least
-- one cluster per 100 rows, which keeps a lookup by an unknown uid an index scan. A lookup by a
-- known uid still uses the most-common-values list ANALYZE keeps, so a big cluster's own reads
-- are planned by its real share. The setting is read by ANALYZE, run here so it counts now.
alter table nodes alter column cluster_uid set (n_distinct = -0.01);
alter table devices alter column cluster_uid set (n_distinct = -0.01);
alter table desired_deployments alter column cluster_uid set (n_distinct = -0.01);
alter table observed_deployments alter column cluster_uid set (n_distinct = -0.01);
alter table rejections alter column cluster_uid set (n_distinct = -0.01);
analyze nodes, devices, desired_deployments, observed_deployments, rejections;
