-- link.stats carries the operation.progress reports the operator dropped for want of room in its
-- send queue (an optional field, as handler_failures: null means "not reported").
alter table link_stats add column dropped_progress bigint;
