-- POST /admin/clusters/{id}/operations may carry an Idempotency-Key: a client that retries after
-- a timeout (the statement may have committed) gets the operation it started, not a second one.
-- Keys are per cluster and live as long as the operation row.
alter table operations add column idempotency_key text;
create unique index operations_by_idempotency_key on operations (cluster_uid, idempotency_key) where idempotency_key is not null;
