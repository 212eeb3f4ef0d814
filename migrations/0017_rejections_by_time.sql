-- The fleet view (polled every second by each open dashboard) counts rejections "in the last
-- hour", fleet-wide and per cluster. Rejections are never deleted and a poisoning operator writes
-- one per frame, so without these the totals scanned the whole table and each cluster's count
-- walked every rejection that cluster ever had (rejections_recent is by id, not by time). With
-- them a read costs what the last hour holds.
create index rejections_by_cluster_time on rejections (cluster_uid, received_at);
create index rejections_by_time on rejections (received_at);
