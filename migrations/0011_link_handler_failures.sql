-- link.stats carries the operator's transient handler failures (an optional field: an operator
-- one version behind does not send it, so null means "not reported").
alter table link_stats add column handler_failures bigint;
